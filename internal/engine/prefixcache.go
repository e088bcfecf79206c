package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/internal/engine/prefix"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// PrefixOptions configure the prefix cache (Options.Prefix; nil: off).
type PrefixOptions struct {
	// RAMBytes is the RAM tier: a fixed size inside the RAM budget; zero
	// leaves it to the planner (an eighth of the budget above the floor);
	// negative: none.
	RAMBytes int64
	// Dir is the disk tier's directory; empty means prefix.DefaultDir().
	Dir string
	// DiskBytes bounds the disk tier; zero means DefaultPrefixDiskBytes;
	// negative: no disk tier.
	DiskBytes int64
	// BlockTokens is the block of the key chain; zero means
	// DefaultPrefixBlock.
	BlockTokens int
	// CheckpointBlocks is how many blocks apart a prefill keeps recurrent
	// state checkpoints (besides the end of every prompt); zero chooses it
	// from the sizes (see checkpointBlocks).
	CheckpointBlocks int
}

// Defaults of the prefix cache.
const (
	DefaultPrefixBlock     = 256
	DefaultPrefixDiskBytes = 32 << 30
	// prefixPayloadVersion names the layout of the payloads below; it is
	// part of the key chain's seed, so a change of layout never reads an
	// old entry.
	prefixPayloadVersion = "k3-prefix-payload/1"
	// minPrefixTokens is the shortest step that looks the cache up and
	// saves to it: a decode step (one token) never does.
	minPrefixTokens = 2
)

// prefixCache is the engine's side of the prefix cache: what a state
// entry and a block entry hold, when a step looks up and restores, and
// when a prefill saves. The storage (keys, lookup, tiers, files) is
// package prefix.
//
// A block entry holds the MLA cache rows (latents and rope keys of every
// MLA layer, model.State.Cached order) of B positions. A state entry at p
// holds the recurrent arrays (model.State.Recurrent order; in a cluster,
// rank 0's heads of them, model.Model.LocalHeads), the MLA cache
// rows of the tail [⌊p/B⌋·B, p), and, when it has them, the logits of
// position p−1, all as little-endian float32s.
type prefixCache struct {
	store *prefix.Store
	m     *model.Model
	// ranks, in a cluster, keep their own KDA heads of each state entry
	// (headcache.go): rank 0's payload then holds only its heads of the
	// recurrent arrays (model.Model.LocalHeads).
	ranks  *cluster.Client
	cfg    *model.Config
	b      int   // tokens per block
	every  int   // blocks between state checkpoints
	fixed  int64 // bytes of the recurrent arrays
	perPos int64 // bytes of one position's MLA cache rows
	// perToken estimates the bytes of weights a prompt token's prefill
	// reads, for Meta.Saves (it only ranks entries for eviction).
	perToken int64

	hits, misses, reused, restores, failed, saves atomic.Int64
	restoreNanos, saveNanos                       atomic.Int64
}

// openPrefixCache opens the store of the engine's prefix cache.
func (e *Engine) openPrefixCache(o *PrefixOptions) error {
	c := e.m.Cfg
	b := o.BlockTokens
	if b <= 0 {
		b = DefaultPrefixBlock
	}
	dir := o.Dir
	if dir == "" && o.DiskBytes >= 0 {
		d, err := prefix.DefaultDir()
		if err != nil {
			e.log.Warn("k3: prefix cache: no user cache directory; the cache keeps to RAM", "err", err)
		}
		dir = d
	}
	disk := o.DiskBytes
	switch {
	case disk == 0:
		disk = DefaultPrefixDiskBytes
	case disk < 0:
		dir, disk = "", 0
	}
	ram := e.mem.PrefixRAM
	if o.RAMBytes < 0 {
		ram = 0
	}
	fixed, perPos := model.StateBytes(c)
	pc := &prefixCache{m: e.m, cfg: c, b: b, fixed: fixed, perPos: perPos}
	fp := e.Fingerprint() + "/" + prefixPayloadVersion
	if e.cluster != nil && e.m.SplitHeads() {
		// Each rank keeps its heads of the entries: rank 0's entries are
		// of another layout, and their keys another chain, for each rank
		// count.
		pc.ranks = e.cluster
		pc.fixed = model.HeadStateBytes(c, e.cluster.Size())
		fp += fmt.Sprintf("/heads of rank 0 of %d", e.cluster.Size())
	}
	// A prompt's prefill runs in the widest passes the budget affords
	// (planner.Residency): checkpoints at least a pass apart, and a token's
	// share of the trunk read per such pass.
	wide := e.res.Plans[len(e.res.Plans)-1]
	pc.every = checkpointBlocks(o.CheckpointBlocks, fixed, perPos*int64(b), wide.Rows, b)
	if wide.TrunkBytesPerPass > 0 {
		pc.perToken = wide.TrunkBytesPerPass / int64(max(wide.Rows, 1))
	}
	st, err := prefix.Open(prefix.Options{
		Fingerprint: fp, BlockSize: b,
		RAMBytes: ram, Alloc: offHeap, Dir: dir, DiskBytes: disk, Logger: e.log,
	})
	if err != nil {
		return fmt.Errorf("k3: prefix cache: %w", err)
	}
	pc.store = st
	e.prefix = pc
	e.log.Info("k3: prefix cache", "block", b, "checkpoint_blocks", pc.every, "ram", ram, "dir", st.Dir(), "disk", disk)
	return nil
}

// offHeap gives the RAM tier page-aligned buffers outside the Go heap
// (counted in the plan's PrefixRAM).
func offHeap(n int) (prefix.Buffer, error) { return iox.AllocAligned(n, iox.BufferOptions{}) }

// checkpointBlocks chooses how many blocks apart a prefill keeps state
// checkpoints: asked, or so that a checkpoint (state bytes) costs about
// what the eight blocks it spans hold; at least the blocks of one pass, so
// that stopping at checkpoints never narrows a pass.
func checkpointBlocks(asked int, state, block int64, rows, b int) int {
	if asked > 0 {
		return asked
	}
	n := int((state + 8*block - 1) / max(8*block, 1))
	return max(n, 1, (rows+b-1)/b)
}

// close flushes the write-behind and closes the store.
func (pc *prefixCache) close() error {
	if pc == nil {
		return nil
	}
	return pc.store.Close()
}

// restore replaces st's contents with the longest cached prefix of tokens
// (at most limit positions; the whole of tokens only if the entry holds
// the logits, which then go to logits). It returns the positions restored,
// 0 on a miss or when an entry fails (st is then reset), whether that was
// the whole prompt, and the leading positions whose blocks are cached
// (Match.Blocks·B): where this prompt branches from one cached before.
func (pc *prefixCache) restore(st *model.State, p *prefix.Prompt, limit int, logits []float32) (n int, whole bool, shared int) {
	m := pc.store.Lookup(p, limit)
	shared = m.Blocks * pc.b
	if !m.Hit() {
		pc.misses.Add(1)
		return 0, false, shared
	}
	start := time.Now()
	defer func() { pc.restoreNanos.Add(int64(time.Since(start))) }()
	st.Reset()
	var workers chan error
	if pc.ranks != nil {
		// Every worker fills its heads of st from its slice while rank 0
		// reads its part.
		workers = make(chan error, 1)
		e := cluster.HeadEntry{Key: m.State, Pos: m.Pos, Tail: m.Pos - m.Anchor*pc.b, Block: pc.b}
		id := st.ID()
		go func() { workers <- pc.ranks.RestoreHeads(context.Background(), id, e) }()
	}
	withLogits, err := pc.read(st, p, m, logits)
	if workers != nil {
		if werr := <-workers; err == nil {
			err = werr
		}
	}
	if err != nil {
		// Evicted since the lookup, or corrupt (the store removed it), or
		// a worker's slice is: prefill from the start. In a cluster the
		// workers that did fill their heads are told to zero them by the
		// next round (a Reset state is fresh). A prefill saves the entry
		// again on every rank.
		st.Reset()
		pc.failed.Add(1)
		pc.misses.Add(1)
		return 0, false, 0
	}
	pc.m.Placed(st)
	pc.hits.Add(1)
	pc.restores.Add(1)
	pc.reused.Add(int64(m.Pos))
	return m.Pos, withLogits, shared
}

// read restores the blocks before m's anchor and m's state into st.
func (pc *prefixCache) read(st *model.State, p *prefix.Prompt, m prefix.Match, logits []float32) (bool, error) {
	for i := range m.Anchor {
		rows, err := st.Extend(pc.b)
		if err != nil {
			return false, err
		}
		if err := pc.get(p.BlockKey(i), rows); err != nil {
			return false, fmt.Errorf("block %d: %w", i, err)
		}
	}
	r, err := pc.store.Get(m.State)
	if err != nil {
		return false, err
	}
	defer r.Close()
	meta := r.Meta()
	want := pc.fixed + pc.perPos*int64(meta.Tail)
	withLogits := meta.HasLogits && logits != nil && m.Pos == p.Len()
	if meta.HasLogits {
		want += int64(4 * pc.cfg.Vocab)
	}
	if meta.Kind != prefix.KindState || meta.Pos != m.Pos || meta.Tail != m.Pos-m.Anchor*pc.b || meta.Size != want {
		return false, fmt.Errorf("state entry %v does not match the prompt", m.State)
	}
	if err := readFloats(r, pc.m.LocalHeads(st)...); err != nil {
		return false, err
	}
	tail, err := st.Extend(meta.Tail)
	if err != nil {
		return false, err
	}
	if err := readFloats(r, tail...); err != nil {
		return false, err
	}
	if meta.HasLogits {
		dst := logits
		if !withLogits {
			dst = nil
		}
		if err := readFloatsOrSkip(r, dst, pc.cfg.Vocab); err != nil {
			return false, err
		}
	}
	// The payload's checksum is checked at its end: only a nil Close
	// means that everything read was what was written.
	return withLogits, r.Close()
}

// get reads one block entry into rows.
func (pc *prefixCache) get(k prefix.Key, rows [][]float32) error {
	r, err := pc.store.Get(k)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.Meta().Size != pc.perPos*int64(pc.b) {
		return fmt.Errorf("block entry %v holds %d bytes, want %d", k, r.Meta().Size, pc.perPos*int64(pc.b))
	}
	if err := readFloats(r, rows...); err != nil {
		return err
	}
	return r.Close()
}

// save stores what a prefill computed: the blocks of positions [from, to)
// not yet stored (the MLA cache rows never change once written), and the
// state at to with its logits (nil: none).
func (pc *prefixCache) save(st *model.State, p *prefix.Prompt, from, to int, logits []float32) {
	start := time.Now()
	defer func() { pc.saveNanos.Add(int64(time.Since(start))) }()
	// In a cluster every rank saves its own KDA heads of the state, which
	// must be theirs (Away; the link's timeout bounds it). A state that
	// cannot be placed is not saved, which costs a later prefill, never a
	// wrong restore.
	if pc.ranks != nil {
		if err := pc.m.Away(context.Background(), st); err != nil {
			return
		}
	}
	for i := from / pc.b; i < to/pc.b; i++ {
		k, meta := p.BlockMeta(i)
		if pc.store.HasBlock(k) {
			continue
		}
		meta.Size = pc.perPos * int64(pc.b)
		meta.Saves = pc.perToken * int64(pc.b)
		rows := st.Cached(i*pc.b, (i+1)*pc.b)
		pc.store.Put(k, meta, func(w io.Writer) error { return writeFloats(w, rows...) })
	}
	k, meta := p.StateMeta(to)
	if pc.ranks != nil {
		// Told even when rank 0 has the entry: a worker that lost its
		// slice (it restarted, or evicted it) files it again.
		pc.ranks.SaveHeads(st.ID(), cluster.HeadEntry{Key: k, Anchor: meta.Anchor, Pos: to, Tail: meta.Tail, Block: pc.b, Saves: pc.perToken * int64(to)})
	}
	if pc.store.Has(k) {
		return
	}
	tail := st.Cached(to-meta.Tail, to)
	meta.Size = pc.fixed + pc.perPos*int64(meta.Tail)
	meta.Sections = []int64{pc.fixed, pc.perPos * int64(meta.Tail)}
	if logits != nil {
		meta.HasLogits = true
		meta.Size += int64(4 * len(logits))
		meta.Sections = append(meta.Sections, int64(4*len(logits)))
	}
	meta.Saves = pc.perToken * int64(to)
	rec := pc.m.LocalHeads(st)
	if stored, _ := pc.store.Put(k, meta, func(w io.Writer) error {
		if err := writeFloats(w, rec...); err != nil {
			return err
		}
		if err := writeFloats(w, tail...); err != nil {
			return err
		}
		if logits != nil {
			return writeFloats(w, logits)
		}
		return nil
	}); stored {
		pc.saves.Add(1)
	}
}

// littleEndian is true where float32s are little-endian in memory, so
// payloads are written and read without a conversion.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatBytes is v's memory as bytes (little-endian hosts only).
func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// writeFloats writes vs as little-endian float32s.
func writeFloats(w io.Writer, vs ...[]float32) error {
	var buf [4096]byte
	for _, v := range vs {
		if littleEndian {
			if _, err := w.Write(floatBytes(v)); err != nil {
				return err
			}
			continue
		}
		for len(v) > 0 {
			n := min(len(v), len(buf)/4)
			for i := range n {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v[i]))
			}
			if _, err := w.Write(buf[:4*n]); err != nil {
				return err
			}
			v = v[n:]
		}
	}
	return nil
}

// readFloats fills vs with little-endian float32s from r.
func readFloats(r io.Reader, vs ...[]float32) error {
	var buf [4096]byte
	for _, v := range vs {
		if littleEndian {
			if _, err := io.ReadFull(r, floatBytes(v)); err != nil {
				return err
			}
			continue
		}
		for len(v) > 0 {
			n := min(len(v), len(buf)/4)
			if _, err := io.ReadFull(r, buf[:4*n]); err != nil {
				return err
			}
			for i := range n {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
			v = v[n:]
		}
	}
	return nil
}

// readFloatsOrSkip reads n float32s into dst, or past them when dst is
// nil (the checksum covers them either way).
func readFloatsOrSkip(r io.Reader, dst []float32, n int) error {
	if dst != nil {
		return readFloats(r, dst[:n])
	}
	_, err := io.CopyN(io.Discard, r, int64(4*n))
	return err
}
