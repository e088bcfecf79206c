package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/k3go/k3/internal/engine/cluster/link"
	"github.com/k3go/k3/model"
)

// Conn is one side of a link between rank 0 and a worker: frames of a kind
// and a payload, both ways. (*link.Conn is one.)
type Conn interface {
	// Send sends one frame made of parts, concatenated.
	Send(kind uint8, parts ...[]byte) error
	// Recv receives one frame into dst (grown as needed) and returns its
	// kind and payload, a prefix of the buffer it used.
	Recv(dst []byte) (kind uint8, payload []byte, err error)
	// Peer names the other side in errors: "rank 2 (10.0.0.3:7070)".
	Peer() string
	Close() error
}

// Dialer connects to worker rank (1..N-1), completes the handshake, and
// returns once the worker has loaded its rank's slice (kindReady).
type Dialer func(ctx context.Context, rank int) (Conn, error)

// ErrRankDown reports a round that could not run because a rank is not
// connected; the error names the rank and why it went.
var ErrRankDown = errors.New("rank not connected")

// Client is rank 0's view of a cluster's other ranks (model.Ranks): each
// round is sent to every worker, rank 0 computes its own rows meanwhile,
// then every worker's rows are read and placed. The caller of Round does
// all of it on its own goroutine: handing a round to another goroutine and
// back costs two wake-ups of sleeping threads per round (a millisecond each
// on a busy virtual machine), more than the transfer itself. A worker that
// fails, hangs past its link's timeout or closes is dropped: the round
// fails with an error naming it, and the Client dials it again in the
// background until it is back (Health says what is missing meanwhile).
type Client struct {
	n     int
	peers []*peer
	log   *slog.Logger

	hdr   []byte
	parts [][]byte
	pf    []byte

	// forgot are states rank 0 no longer has (ForgetState), told to the
	// workers with the next round.
	forgetMu sync.Mutex
	forgot   []uint64
	forgets  []byte

	closed    atomic.Bool
	stop      chan struct{}
	redialing sync.WaitGroup
	pinging   sync.WaitGroup

	rounds, sent, received atomic.Int64
	roundNanos, waitNanos  atomic.Int64
	// stateBytes counts the KDA heads moved whole between rank 0 and the
	// workers (PutState, GetState), which the rounds' counters do not.
	stateBytes atomic.Int64
}

// peer is one worker: its connection, and the buffers its replies are
// read into.
type peer struct {
	c    *Client
	rank int
	dial Dialer

	// talk is held by whoever exchanges frames on conn (a round from its
	// send to its reply, a prefetch note, a ping), so that frames never
	// interleave.
	talk sync.Mutex

	mu   sync.Mutex
	conn Conn
	down error // why it is not connected (nil when it is)

	sentTo Conn  // the connection a round was sent on, awaiting its reply
	err    error // why the round could not be sent
	buf    []byte
	slices [][]float32
}

// pingEvery is how often an idle worker is asked whether it is there, so
// that a rank that went away shows in Health before a request needs it.
const pingEvery = 2 * time.Second

// NewClient connects to the workers of a cluster of len(dials)+1 ranks
// (dials[i] reaches rank i+1). A worker that refuses the handshake (another
// checkpoint, kernel, version, size or key) or cannot load its rows fails
// it, naming the rank and why: a setting to fix. A worker that cannot be
// reached yet is dialled again in the background, as after a failure, so
// that rank 0 starts (and says in Health what is missing) before all its
// workers are up.
func NewClient(ctx context.Context, dials []Dialer, log *slog.Logger) (*Client, error) {
	if !littleEndian() {
		return nil, errors.New("cluster: ranks exchange floats as they lie in memory, which needs a little-endian machine")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{n: len(dials) + 1, log: log, stop: make(chan struct{})}
	for i, d := range dials {
		p := &peer{c: c, rank: i + 1, dial: d}
		c.peers = append(c.peers, p)
	}
	type dialed struct {
		i    int
		conn Conn
		err  error
	}
	results := make(chan dialed, len(c.peers))
	for i, p := range c.peers {
		go func() {
			conn, err := p.dial(ctx, p.rank)
			results <- dialed{i, conn, err}
		}()
	}
	var errs []error
	var later []*peer
	for range c.peers {
		r := <-results
		p := c.peers[r.i]
		switch {
		case r.err == nil:
			p.conn = r.conn
		case errors.Is(r.err, link.ErrRefused) || errors.Is(r.err, ErrNotLoaded) || ctx.Err() != nil:
			errs = append(errs, fmt.Errorf("rank %d: %w", r.i+1, r.err))
		default:
			p.down = r.err
			later = append(later, p)
		}
	}
	if len(errs) > 0 {
		for _, p := range c.peers {
			if p.conn != nil {
				p.conn.Close()
			}
		}
		return nil, errors.Join(errs...)
	}
	for _, p := range later {
		c.log.Warn("k3: cluster: a rank cannot be reached yet; dialling it again", "rank", p.rank, "err", p.down)
		c.redialing.Add(1)
		go p.redial()
	}
	c.pinging.Add(1)
	go c.pinger()
	return c, nil
}

// pinger pings every idle worker every pingEvery until the Client closes
// (a busy one answers rounds, which is proof enough).
func (c *Client) pinger() {
	defer c.pinging.Done()
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		// Each on its own goroutine: a hung worker holds its ping until
		// the link's timeout, which must not delay noticing the others.
		var pings sync.WaitGroup
		for _, p := range c.peers {
			if p.talk.TryLock() { // else busy with a round
				pings.Go(func() {
					defer p.talk.Unlock()
					p.ping()
				})
			}
		}
		pings.Wait()
	}
}

// Size implements model.Ranks.
func (c *Client) Size() int { return c.n }

// Round implements model.Ranks: rd is sent to every worker, local computes
// rank 0's rows meanwhile, then the workers' rows are read and placed.
func (c *Client) Round(ctx context.Context, rd *model.Round, local func() error) (err error) {
	start := time.Now()
	c.hdr = encodeRound(c.hdr, rd)
	c.parts = append(c.parts[:0], c.hdr)
	size := int64(len(c.hdr))
	for _, in := range rd.Inputs {
		b := floatBytes(in)
		c.parts = append(c.parts, b)
		size += int64(len(b))
	}
	for _, p := range c.peers {
		p.talk.Lock()
	}
	c.sendForgets()
	answered := false
	defer func() {
		for _, p := range c.peers {
			if !answered && p.sentTo != nil {
				// local panicked: the reply this round awaits would be
				// read as the next round's.
				p.drop(p.sentTo, errors.New("a round was abandoned before its reply"))
			}
			p.sentTo = nil
			p.talk.Unlock()
		}
	}()
	for _, p := range c.peers {
		p.send(c.parts, size)
	}
	err = local()
	waited := time.Now()
	for _, p := range c.peers {
		if perr := p.reply(rd); perr != nil && err == nil {
			err = perr
		}
	}
	answered = true
	end := time.Now()
	c.rounds.Add(1)
	c.roundNanos.Add(int64(end.Sub(start)))
	c.waitNanos.Add(int64(end.Sub(waited)))
	return err
}

// Prefetch implements model.Prefetcher: every worker starts reading its
// half of experts of layer, for the round that will need them. The note
// has no reply; a failure to send it drops the link (the next round
// reports it).
func (c *Client) Prefetch(ctx context.Context, layer, half int, experts []int32) error {
	c.pf = encodePrefetch(c.pf, layer, half, experts)
	for _, p := range c.peers {
		p.talk.Lock()
		p.mu.Lock()
		conn := p.conn
		p.mu.Unlock()
		if conn != nil {
			if err := conn.Send(kindPrefetch, c.pf); err != nil {
				p.drop(conn, fmt.Errorf("sending a prefetch: %w", err))
			}
		}
		p.talk.Unlock()
		// Not counted in Stats, which count rounds: a prefetch is a few
		// dozen bytes per MoE layer.
	}
	return nil
}

// ForgetState implements model.StateRanks: the workers drop their heads
// of state id with the next round.
func (c *Client) ForgetState(id uint64) {
	c.forgetMu.Lock()
	c.forgot = append(c.forgot, id)
	c.forgetMu.Unlock()
}

// sendForgets tells every connected worker the states forgotten since the
// last round (every peer's talk is held). A worker that misses the note
// (down, or its link fails) has lost its states anyway.
func (c *Client) sendForgets() {
	c.forgetMu.Lock()
	c.forgets = c.forgets[:0]
	for _, id := range c.forgot {
		c.forgets = binary.LittleEndian.AppendUint64(c.forgets, id)
	}
	c.forgot = c.forgot[:0]
	c.forgetMu.Unlock()
	if len(c.forgets) == 0 {
		return
	}
	for _, p := range c.peers {
		if conn := p.current(); conn != nil {
			if err := conn.Send(kindForget, c.forgets); err != nil {
				p.drop(conn, fmt.Errorf("sending a forget note: %w", err))
			}
		}
	}
}

// current returns p's connection, nil while it is down.
func (p *peer) current() Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

// PutState implements model.StateRanks: parts [from, ...) of rank's heads
// of state id go to it ahead of the rounds that use them (no reply: a worker that cannot
// take them ends the link, and the next round reports it).
func (c *Client) PutState(ctx context.Context, rank int, id uint64, from int, parts [][]float32) error {
	p, conn, err := c.talkTo(rank)
	if err != nil {
		return err
	}
	defer p.talk.Unlock()
	frame := make([][]byte, 0, len(parts)+1)
	frame = append(frame, encodeStateHeader(nil, id, from, 0))
	for _, part := range parts {
		frame = append(frame, floatBytes(part))
	}
	if err := conn.Send(kindPutState, frame...); err != nil {
		err = fmt.Errorf("sending a state: %w", err)
		p.drop(conn, err)
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	for _, part := range parts {
		c.stateBytes.Add(4 * int64(len(part)))
	}
	return nil
}

// RollbackState implements model.StateRanks: rank keeps the first keep
// rows of the speculation over state id (no reply: a worker that cannot
// ends the link, and the next round reports it).
func (c *Client) RollbackState(ctx context.Context, rank int, id uint64, keep int) error {
	p, conn, err := c.talkTo(rank)
	if err != nil {
		return err
	}
	defer p.talk.Unlock()
	if err := conn.Send(kindRollback, encodeRollback(nil, id, keep)); err != nil {
		err = fmt.Errorf("sending a rollback: %w", err)
		p.drop(conn, err)
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return nil
}

// GetState implements model.StateRanks: rank sends parts [from, ...) of
// its heads of state id, which fill parts.
func (c *Client) GetState(ctx context.Context, rank int, id uint64, from int, parts [][]float32) error {
	p, conn, err := c.talkTo(rank)
	if err != nil {
		return err
	}
	defer p.talk.Unlock()
	fail := func(err error) error {
		p.drop(conn, err)
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	if err := conn.Send(kindGetState, encodeStateHeader(nil, id, from, len(parts))); err != nil {
		return fail(fmt.Errorf("asking for a state: %w", err))
	}
	p.buf = alignedGrow(p.buf)
	kind, msg, err := conn.Recv(p.buf)
	if err != nil {
		return fail(fmt.Errorf("waiting for a state: %w", err))
	}
	if cap(msg) > cap(p.buf) {
		p.buf = msg[:cap(msg)]
	}
	switch kind {
	case kindError:
		return fmt.Errorf("%s: %s", conn.Peer(), string(msg))
	case kindState:
	default:
		return fail(fmt.Errorf("%s: %w: a reply of kind %d to a state request", conn.Peer(), ErrMessage, kind))
	}
	want := 0
	for _, part := range parts {
		want += len(part)
	}
	if len(msg) != 4*want {
		return fail(fmt.Errorf("%s: %w: a state of %d bytes, want %d floats", conn.Peer(), ErrMessage, len(msg), want))
	}
	all := bytesFloats(msg)
	for _, part := range parts {
		all = all[copy(part, all):]
	}
	c.stateBytes.Add(int64(len(msg)))
	return nil
}

// SaveHeads tells every connected worker to file its heads of state id
// under e (no reply). It must follow the last round that changed the state
// and precede the next, as it does on the state's own goroutine: the
// frames of one link are read in order. A worker that misses it (down, or
// its link fails) has no slice of e, which a restore will find.
func (c *Client) SaveHeads(id uint64, e HeadEntry) {
	msg := encodeHeadEntry(nil, id, &e)
	for _, p := range c.peers {
		p.talk.Lock()
		if conn := p.current(); conn != nil {
			if err := conn.Send(kindSaveHeads, msg); err != nil {
				p.drop(conn, fmt.Errorf("sending a prefix-cache save: %w", err))
			}
		}
		p.talk.Unlock()
	}
}

// RestoreHeads has every worker fill its heads of state id from its slice
// of e, all of them at once. An error (a worker without its slice, or not
// connected) names the first rank that failed; the workers that did fill
// theirs hold heads of a state rank 0 must then Reset (its next round
// zeroes them).
func (c *Client) RestoreHeads(ctx context.Context, id uint64, e HeadEntry) error {
	msg := encodeHeadEntry(nil, id, &e)
	for _, p := range c.peers {
		p.talk.Lock()
	}
	defer func() {
		for _, p := range c.peers {
			p.talk.Unlock()
		}
	}()
	sent := make([]Conn, len(c.peers))
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	for i, p := range c.peers {
		conn := p.current()
		if conn == nil {
			fail(p.downErr())
			continue
		}
		if err := conn.Send(kindRestoreHeads, msg); err != nil {
			err = fmt.Errorf("asking for a prefix-cache restore: %w", err)
			p.drop(conn, err)
			fail(fmt.Errorf("rank %d: %w", p.rank, err))
			continue
		}
		sent[i] = conn
	}
	for i, p := range c.peers {
		conn := sent[i]
		if conn == nil {
			continue
		}
		p.buf = alignedGrow(p.buf)
		kind, reply, err := conn.Recv(p.buf)
		switch {
		case err != nil:
			err = fmt.Errorf("waiting for a prefix-cache restore: %w", err)
			p.drop(conn, err)
			fail(fmt.Errorf("rank %d: %w", p.rank, err))
		case kind == kindError:
			fail(fmt.Errorf("%s: %s", conn.Peer(), reply))
		case kind != kindRestored || len(reply) != 0:
			err := fmt.Errorf("%s: %w: a reply of kind %d to a prefix-cache restore", conn.Peer(), ErrMessage, kind)
			p.drop(conn, err)
			fail(err)
		}
	}
	return first
}

// talkTo takes worker rank's talk and returns its connection, for one
// exchange of frames; the caller unlocks p.talk. A rank that is not
// connected is an error (and talk is not held).
func (c *Client) talkTo(rank int) (p *peer, conn Conn, err error) {
	if rank < 1 || rank > len(c.peers) {
		return nil, nil, fmt.Errorf("cluster: rank %d of %d", rank, c.n)
	}
	p = c.peers[rank-1]
	p.talk.Lock()
	if conn = p.current(); conn == nil {
		p.talk.Unlock()
		return nil, nil, p.downErr()
	}
	return p, conn, nil
}

// downErr says why p is not connected.
func (p *peer) downErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("%w: rank %d: %w", ErrRankDown, p.rank, p.down)
}

// ping checks that an idle, connected p answers.
func (p *peer) ping() {
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn == nil {
		return
	}
	if err := conn.Send(kindPing); err != nil {
		p.drop(conn, fmt.Errorf("ping: %w", err))
		return
	}
	p.buf = alignedGrow(p.buf)
	kind, _, err := conn.Recv(p.buf)
	switch {
	case err != nil:
		p.drop(conn, fmt.Errorf("ping: %w", err))
	case kind != kindPong:
		p.drop(conn, fmt.Errorf("%s: %w: a reply of kind %d to a ping", conn.Peer(), ErrMessage, kind))
	}
}

// send sends a round's frame (parts) to p; reply reads the answer. p.talk
// is held.
func (p *peer) send(parts [][]byte, size int64) {
	p.mu.Lock()
	conn, down := p.conn, p.down
	p.mu.Unlock()
	if conn == nil {
		p.err = fmt.Errorf("%w: rank %d: %w", ErrRankDown, p.rank, down)
		return
	}
	if err := conn.Send(kindRound, parts...); err != nil {
		p.err = fmt.Errorf("sending a round: %w", err)
		p.drop(conn, p.err)
		return
	}
	p.c.sent.Add(size)
	p.sentTo, p.err = conn, nil
}

// reply reads p's answer to the round rd that send sent, and places its
// rows; or returns why it was not sent.
func (p *peer) reply(rd *model.Round) error {
	conn := p.sentTo
	if conn == nil {
		return p.err
	}
	p.sentTo = nil
	fail := func(err error) error {
		p.drop(conn, err)
		return err
	}
	p.buf = alignedGrow(p.buf)
	kind, msg, err := conn.Recv(p.buf)
	if err != nil {
		return fail(fmt.Errorf("waiting for its rows: %w", err))
	}
	if cap(msg) > cap(p.buf) {
		p.buf = msg[:cap(msg)] // Recv grew it: keep the larger buffer
	}
	p.c.received.Add(int64(len(msg)))
	switch kind {
	case kindSlices:
		if p.slices, err = placeReply(rd, p.rank, p.c.n, msg, p.slices); err != nil {
			return fail(fmt.Errorf("%s: %w", conn.Peer(), err))
		}
		return nil
	case kindError:
		// The worker is fine; the round failed there (its disk, say).
		return fmt.Errorf("%s: %s", conn.Peer(), string(msg))
	}
	return fail(fmt.Errorf("%s: %w: a reply of kind %d to a round", conn.Peer(), ErrMessage, kind))
}

// alignedGrow returns b with at least a small capacity, 4-byte aligned
// (a fresh Go allocation of bytes is aligned to at least 8).
func alignedGrow(b []byte) []byte {
	if cap(b) < 4096 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return make([]byte, 4096)
	}
	return b[:cap(b)]
}

// drop closes p's connection after err and starts dialling it again.
func (p *peer) drop(conn Conn, err error) {
	p.mu.Lock()
	if p.conn != conn {
		p.mu.Unlock()
		return
	}
	p.conn, p.down = nil, err
	p.mu.Unlock()
	conn.Close()
	p.c.log.Warn("k3: cluster: a rank went away; reconnecting", "rank", p.rank, "err", err)
	if p.c.closed.Load() {
		return
	}
	p.c.redialing.Add(1)
	go p.redial()
}

// redial dials p until it is back or the Client closes.
func (p *peer) redial() {
	defer p.c.redialing.Done()
	wait := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-p.c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		conn, err := p.dial(ctx, p.rank)
		cancel()
		if err == nil {
			p.mu.Lock()
			p.conn, p.down = conn, nil
			p.mu.Unlock()
			p.c.log.Info("k3: cluster: a rank is back", "rank", p.rank, "peer", conn.Peer())
			if p.c.closed.Load() {
				conn.Close()
			}
			return
		}
		p.mu.Lock()
		p.down = err
		p.mu.Unlock()
		select {
		case <-p.c.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Connected returns how many ranks are connected, rank 0 included.
func (c *Client) Connected() int {
	n := 1
	for _, p := range c.peers {
		p.mu.Lock()
		if p.conn != nil {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// Health returns nil while every rank is connected, else an error naming
// each missing rank and why.
func (c *Client) Health() error {
	var missing []string
	for _, p := range c.peers {
		p.mu.Lock()
		if p.conn == nil {
			missing = append(missing, fmt.Sprintf("rank %d: %v", p.rank, p.down))
		}
		p.mu.Unlock()
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRankDown, strings.Join(missing, "; "))
}

// Stats are a Client's cumulative counters: rounds (gathers), the bytes of
// rounds sent to all workers and received from them (not the few bytes of
// the experts' prefetch notes), the rounds' wall time, and
// the part of it rank 0 waited for workers after its own rows were done.
type Stats struct {
	Rounds, BytesSent, BytesReceived int64
	RoundTime, WaitTime              time.Duration
	// StateBytes is the bytes of KDA heads of states moved between rank 0
	// and the workers, both ways (PutState, GetState: a state file's, a
	// fork's; model.Model.EachRecurrent and Home).
	StateBytes int64
}

// Stats returns the counters since NewClient.
func (c *Client) Stats() Stats {
	return Stats{Rounds: c.rounds.Load(), BytesSent: c.sent.Load(), BytesReceived: c.received.Load(),
		RoundTime: time.Duration(c.roundNanos.Load()), WaitTime: time.Duration(c.waitNanos.Load()), StateBytes: c.stateBytes.Load()}
}

// Close closes every connection and stops reconnecting. No round may be
// running.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.stop)
	c.pinging.Wait()
	c.redialing.Wait()
	for _, p := range c.peers {
		p.mu.Lock()
		if p.conn != nil {
			p.conn.Close()
			p.conn = nil
		}
		p.down = errors.New("the cluster client closed")
		p.mu.Unlock()
	}
	return nil
}
