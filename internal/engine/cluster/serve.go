package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/k3go/k3/model"
)

// RoundServer computes one rank's rows of rank 0's rounds (a
// *model.Server is one).
type RoundServer interface {
	Round(ctx context.Context, rd *model.Round) ([][]float32, error)
	// Prefetch begins reading experts' halves a coming round needs; its
	// error is that round's to report, so it is not answered.
	Prefetch(ctx context.Context, layer, half int, experts []int32) error
	// Heads holds this rank's KDA heads of rank 0's sequences' states
	// (model.RoundKDA), for as long as the connection lasts.
	Heads() *model.HeadStore
	// Rollback keeps the first keep rows of the speculation the last
	// rounds recorded over state id (model.RoundSeq.Spec).
	Rollback(id uint64, keep int) error
	End()
}

// HeadCache is implemented by RoundServers that keep their heads of
// states in a prefix cache of their own, as slices of rank 0's entries
// under rank 0's keys. Without it a worker refuses every restore (rank 0
// then prefills instead) and ignores saves.
type HeadCache interface {
	// SaveHeads files this rank's heads of state id under e (nothing if
	// it holds them already, or holds no such state); a failure costs a
	// later restore, so it is not answered.
	SaveHeads(id uint64, e HeadEntry)
	// RestoreHeads fills this rank's heads of state id (made if new) from
	// its slice of e, or says why it cannot (its slice was evicted).
	RestoreHeads(id uint64, e HeadEntry) error
}

// Serve answers rank 0's rounds on conn with srv, its rows of every
// product, until conn fails, rank 0 leaves or ctx ends (it then closes
// conn). A round that fails here (a read of this rank's weights) is
// answered with the error, and the connection goes on; a message that
// does not decode ends it. The caller has sent kindReady (Ready).
func Serve(ctx context.Context, conn Conn, srv RoundServer) error {
	defer srv.End()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := alignedGrow(nil)
	var rd model.Round
	var parts [][]byte
	var ids []int32
	for {
		kind, msg, err := conn.Recv(buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if cap(msg) > cap(buf) {
			buf = msg[:cap(msg)]
		}
		switch kind {
		case kindPing:
			if err := conn.Send(kindPong); err != nil {
				return err
			}
		case kindPrefetch:
			layer, half, got, err := decodePrefetch(msg, ids)
			if err != nil {
				return fmt.Errorf("%s: %w", conn.Peer(), err)
			}
			ids = got
			srv.Prefetch(ctx, layer, half, ids)
		case kindPutState:
			id, from, _, data, err := decodeStateID(msg)
			if err == nil {
				err = srv.Heads().Put(id, from, bytesFloats(data))
			}
			if err != nil {
				// rank 0 sent heads this rank would not hold: the next
				// round could not be right.
				return fmt.Errorf("%s: %w: %w", conn.Peer(), ErrMessage, err)
			}
		case kindGetState:
			id, from, n, rest, err := decodeStateID(msg)
			if err != nil || len(rest) != 0 {
				return fmt.Errorf("%s: %w: a state request of %d bytes", conn.Peer(), ErrMessage, len(msg))
			}
			got, err := srv.Heads().Get(id)
			if err == nil && from+n > len(got) {
				err = fmt.Errorf("parts [%d, %d) of a state of %d parts", from, from+n, len(got))
			}
			if err == nil {
				got = got[from : from+n]
			}
			if err != nil {
				if err := conn.Send(kindError, []byte(err.Error())); err != nil {
					return err
				}
				continue
			}
			parts = parts[:0]
			for _, s := range got {
				parts = append(parts, floatBytes(s))
			}
			if err := conn.Send(kindState, parts...); err != nil {
				return err
			}
		case kindForget:
			if len(msg)%8 != 0 {
				return fmt.Errorf("%s: %w: a forget note of %d bytes", conn.Peer(), ErrMessage, len(msg))
			}
			for b := msg; len(b) > 0; b = b[8:] {
				srv.Heads().Forget(binary.LittleEndian.Uint64(b))
			}
		case kindRollback:
			id, keep, err := decodeRollback(msg)
			if err == nil {
				err = srv.Rollback(id, keep)
			}
			if err != nil {
				// The next round would run on heads rank 0 did not keep.
				return fmt.Errorf("%s: %w: %w", conn.Peer(), ErrMessage, err)
			}
		case kindSaveHeads, kindRestoreHeads:
			id, e, err := decodeHeadEntry(msg)
			if err != nil {
				return fmt.Errorf("%s: %w", conn.Peer(), err)
			}
			hc, ok := srv.(HeadCache)
			if kind == kindSaveHeads {
				if ok {
					hc.SaveHeads(id, e)
				}
				continue
			}
			if !ok {
				err = errors.New("this rank keeps no prefix cache")
			} else {
				err = hc.RestoreHeads(id, e)
			}
			if err != nil {
				if err := conn.Send(kindError, []byte(err.Error())); err != nil {
					return err
				}
				continue
			}
			if err := conn.Send(kindRestored); err != nil {
				return err
			}
		case kindRound:
			if err := decodeRound(msg, &rd); err != nil {
				conn.Send(kindError, []byte(err.Error()))
				return fmt.Errorf("%s: %w", conn.Peer(), err)
			}
			sl, err := srv.Round(ctx, &rd)
			if err != nil {
				if err := conn.Send(kindError, []byte(err.Error())); err != nil {
					return err
				}
				continue
			}
			parts = parts[:0]
			for _, s := range sl {
				parts = append(parts, floatBytes(s))
			}
			if err := conn.Send(kindSlices, parts...); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: %w: a message of kind %d", conn.Peer(), ErrMessage, kind)
		}
	}
}

// Ready tells rank 0 that this worker has loaded its rank's slice, or,
// with a non-nil err, why it could not.
func Ready(conn Conn, err error) error {
	if err != nil {
		return conn.Send(kindError, []byte(err.Error()))
	}
	return conn.Send(kindReady)
}

// ErrNotLoaded reports a worker that connected but could not load its
// rank's slice (its budget, its disk): a setting to fix, not a rank to wait
// for.
var ErrNotLoaded = errors.New("the worker could not load its rows")

// AwaitReady waits on rank 0's side of a new connection for the worker to
// load its slice (kindReady), or returns the error it sends.
func AwaitReady(conn Conn) error {
	kind, msg, err := conn.Recv(make([]byte, 256))
	switch {
	case err != nil:
		return err
	case kind == kindError:
		return fmt.Errorf("%s: %w: %s", conn.Peer(), ErrNotLoaded, msg)
	case kind != kindReady:
		return fmt.Errorf("%s: %w: a message of kind %d before it was ready", conn.Peer(), ErrMessage, kind)
	}
	return nil
}
