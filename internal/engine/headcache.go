package engine

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/internal/engine/prefix"
	"github.com/k3go/k3/model"
)

// A cluster's prefix cache is kept in slices: rank 0 stores each entry's
// MLA cache rows, logits and its own KDA heads of the state; every worker
// stores its heads of the state under the same key, in a store of its own
// (headCache). A save is a note to every worker, which files its heads of
// the state as they stand after the pass that rank 0 saves after (the
// note follows that pass's rounds on the link and precedes the next); a
// restore asks every worker and succeeds on all or is undone on all. No
// state crosses the network for either.

// headPayloadVersion names the layout of a worker's slice (its heads of
// the state, model.HeadParts order, little-endian float32s); it is part
// of the worker store's fingerprint, with the rank and the rank count,
// so that a slice of another layout or rank is never read.
const headPayloadVersion = "k3-prefix-heads/1"

// headCache is a worker's slices of rank 0's prefix-cache entries, in a
// prefix.Store keyed by rank 0's keys. It is opened on the first save or
// restore (the block size is rank 0's), and again for another block size
// or rank. It is used by the goroutine serving rank 0 only.
type headCache struct {
	log        *slog.Logger
	fp         string // the checkpoint's fingerprint
	ram        int64  // the RAM tier (the worker's plan holds it)
	dir        string // "" for no disk tier
	disk       int64
	alloc      func(n int) (prefix.Buffer, error)
	rank, size int

	store *prefix.Store
	block int
	bytes int64 // one slice's payload
}

// headCacheRAM returns a worker's RAM tier for its slices: asked, or
// (0) room for two slices per session of rank 0 (a prompt's checkpoints
// and its end wait there for the disk's write-behind, and the latest are
// restored from RAM); negative: none.
func headCacheRAM(cfg *model.Config, ranks, sessions int, asked int64) int64 {
	switch {
	case asked < 0:
		return 0
	case asked > 0:
		return asked
	}
	return 2 * int64(max(sessions, 1)) * model.HeadStateBytes(cfg, ranks)
}

// open readies the store for rank of ranks at block size b.
func (hc *headCache) open(hs *model.HeadStore, rank, ranks, b int) error {
	if hc.store != nil && hc.block == b && hc.rank == rank && hc.size == ranks {
		return nil
	}
	hc.close()
	if hc.ram <= 0 && hc.dir == "" {
		return fmt.Errorf("this rank keeps no prefix cache")
	}
	st, err := prefix.Open(prefix.Options{
		Fingerprint: fmt.Sprintf("%s/%s/rank %d of %d", hc.fp, headPayloadVersion, rank, ranks), BlockSize: b,
		RAMBytes: hc.ram, Alloc: hc.alloc, Dir: hc.dir, DiskBytes: hc.disk, Logger: hc.log,
	})
	if err != nil {
		return fmt.Errorf("prefix cache: %w", err)
	}
	hc.store, hc.block, hc.rank, hc.size, hc.bytes = st, b, rank, ranks, hs.Bytes()
	hc.log.Info("k3: worker: prefix cache", "block", b, "ram", hc.ram, "dir", st.Dir(), "disk", hc.disk)
	return nil
}

// close flushes the write-behind and closes the store.
func (hc *headCache) close() {
	if hc.store != nil {
		if err := hc.store.Close(); err != nil {
			hc.log.Warn("k3: worker: prefix cache", "err", err)
		}
		hc.store = nil
	}
}

// meta is what a slice of e is filed with.
func (hc *headCache) meta(e *cluster.HeadEntry) prefix.Meta {
	return prefix.Meta{Kind: prefix.KindState, Pos: e.Pos, Tail: e.Tail, Anchor: prefix.Key(e.Anchor), Size: hc.bytes, Saves: e.Saves}
}

// save files hs's heads of state id under e.
func (hc *headCache) save(hs *model.HeadStore, rank, ranks int, id uint64, e cluster.HeadEntry) {
	if err := hc.open(hs, rank, ranks, e.Block); err != nil {
		hc.log.Debug("k3: worker: a prefix-cache save not kept", "err", err)
		return
	}
	key := prefix.Key(e.Key)
	if hc.store.Has(key) {
		return
	}
	parts, err := hs.Get(id)
	if err != nil {
		hc.log.Debug("k3: worker: a prefix-cache save not kept", "err", err)
		return
	}
	if _, err := hc.store.Put(key, hc.meta(&e), func(w io.Writer) error { return writeFloats(w, parts...) }); err != nil {
		hc.log.Debug("k3: worker: a prefix-cache save not kept", "err", err)
	}
}

// restore fills hs's heads of state id (made if new) from its slice of
// e. On a failure hs holds no state id: the round that follows rank 0's
// Reset makes it afresh.
func (hc *headCache) restore(hs *model.HeadStore, rank, ranks int, id uint64, e cluster.HeadEntry) (err error) {
	if err := hc.open(hs, rank, ranks, e.Block); err != nil {
		return err
	}
	r, err := hc.store.Get(prefix.Key(e.Key))
	if err != nil {
		return fmt.Errorf("prefix cache: rank %d: %w", rank, err)
	}
	defer r.Close()
	if m := r.Meta(); m.Kind != prefix.KindState || m.Pos != e.Pos || m.Tail != e.Tail || m.Size != hc.bytes {
		return fmt.Errorf("prefix cache: rank %d: entry %v holds %d bytes at %d, want %d at %d", rank, prefix.Key(e.Key), m.Size, m.Pos, hc.bytes, e.Pos)
	}
	defer func() {
		if err != nil {
			hs.Forget(id)
		}
	}()
	if err := readFloats(r, hs.Make(id)...); err != nil {
		return fmt.Errorf("prefix cache: rank %d: %w", rank, err)
	}
	// Only a nil Close means that the payload's checksum held.
	if err := r.Close(); err != nil {
		return fmt.Errorf("prefix cache: rank %d: %w", rank, err)
	}
	return nil
}

// workerServer is a worker's model.Server with its slices of rank 0's
// prefix-cache entries (cluster.HeadCache).
type workerServer struct {
	*model.Server
	hc          *headCache
	rank, ranks int
}

func (ws workerServer) SaveHeads(id uint64, e cluster.HeadEntry) {
	ws.hc.save(ws.Heads(), ws.rank, ws.ranks, id, e)
}

func (ws workerServer) RestoreHeads(id uint64, e cluster.HeadEntry) error {
	return ws.hc.restore(ws.Heads(), ws.rank, ws.ranks, id, e)
}
