package model

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Trunk serves the dense weights of every layer part: pinned parts stay in
// memory; the others stream through a ring of buffers, the next parts read
// while the current one computes. Parts are used in a fixed cyclic order
// ((0, attention), (0, ffn), (1, attention), ... and around again for the
// next pass), so the ring always knows what to read next, including across
// the end of a pass. One forward pass at a time may use a streaming trunk
// (BeginPass/EndPass); a fully pinned trunk serves passes concurrently.
type Trunk struct {
	plan   *Plan
	read   ReadFunc
	loader *partLoader
	pinned []*LayerMats // by unit; nil when streamed
	order  []int        // streamed units in pass order
	pos    []int        // unit -> index in order, -1 if pinned
	slots  []*ringSlot

	passMu sync.Mutex // one pass at a time while streaming

	mu      sync.Mutex
	changed chan struct{} // a read completed or the trunk closed
	next    int           // index in order of the next unit to read into a free slot
	closed  bool
	ctx     context.Context // reads run under it; cancelled by Close
	cancel  context.CancelFunc
	pending sync.WaitGroup // reads in flight

	// Stats.
	bytesRead     atomic.Int64 // everything, pinned loads included
	streamedBytes atomic.Int64 // streamed reads only
	readNanos     atomic.Int64
	waitNanos     atomic.Int64
	hits          atomic.Int64 // acquires of pinned parts
	decodeNanos   atomic.Int64 // decoding compressed parts, summed over parts
	decodedBytes  atomic.Int64 // bytes produced by decoding
	streamed      atomic.Int64 // acquires of streamed parts
}

type slotState int

const (
	slotEmpty slotState = iota
	slotLoading
	slotReady
	slotBusy
	slotFailed
)

type ringSlot struct {
	buf   []byte
	stage []byte    // compressed bytes, when the pack is compressed
	run   decodeRun // its decode, reused
	mats  LayerMats
	unit  int
	state slotState
	err   error
}

// Alloc returns a buffer of n bytes for weights (the engine passes an
// aligned, off-heap allocator); Free returns it.
type Alloc func(n int64) ([]byte, error)

// NewTrunk reads the pinned parts now and sets up the ring. alloc provides
// every buffer (pinned parts and ring slots).
func NewTrunk(ctx context.Context, p *Plan, mp *MemoryPlan, read ReadFunc, alloc Alloc) (*Trunk, error) {
	t := &Trunk{plan: p, read: read, loader: newPartLoader(p, read), pinned: make([]*LayerMats, len(p.parts)), pos: make([]int, len(p.parts))}
	ok := false
	defer func() {
		if !ok {
			t.loader.close()
		}
	}()
	// Staging buffers for a compressed pack: the pinned loads use the
	// first, ring slot i the i-th.
	var stages [][]byte
	if need := p.stagingBytes(); need > 0 {
		if mp.StagingBytes < need || mp.StagingBuffers < max(mp.RingSlots, 1) {
			return nil, fmt.Errorf("trunk: the memory plan has %d staging buffers of %d bytes; the compressed trunk needs %d of %d",
				mp.StagingBuffers, mp.StagingBytes, max(mp.RingSlots, 1), need)
		}
		for i := 0; i < mp.StagingBuffers; i++ {
			b, err := alloc(mp.StagingBytes)
			if err != nil {
				return nil, fmt.Errorf("staging buffer %d: %w", i, err)
			}
			stages = append(stages, b)
		}
	}
	var pinRun decodeRun
	t.changed = make(chan struct{}, 1)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for u := range p.parts {
		t.pos[u] = -1
		if mp.Pinned[u] {
			continue
		}
		t.pos[u] = len(t.order)
		t.order = append(t.order, u)
	}
	for u := range p.parts {
		if !mp.Pinned[u] {
			continue
		}
		pp := &p.parts[u]
		buf, err := alloc(pp.bytes)
		if err != nil {
			return nil, fmt.Errorf("pinning layer %d %s: %w", pp.layer, pp.part, err)
		}
		var stage []byte
		if stages != nil {
			stage = stages[0]
		}
		n, err := t.loader.load(ctx, pp, buf, stage, &pinRun)
		t.bytesRead.Add(n)
		if err != nil {
			return nil, fmt.Errorf("layer %d %s: %w", pp.layer, pp.part, err)
		}
		t.pinned[u] = new(LayerMats)
		bind(buf, pp.mats, t.pinned[u])
	}
	if len(t.order) > 0 {
		for i := 0; i < mp.RingSlots; i++ {
			buf, err := alloc(mp.RingSlotBytes)
			if err != nil {
				return nil, fmt.Errorf("ring slot %d: %w", i, err)
			}
			s := &ringSlot{buf: buf, unit: -1}
			if stages != nil {
				s.stage = stages[i]
			}
			t.slots = append(t.slots, s)
		}
		if len(t.slots) == 0 {
			return nil, fmt.Errorf("trunk: %d parts stream but the plan has no ring slot", len(t.order))
		}
	}
	ok = true
	return t, nil
}

// Streaming reports whether any part streams.
func (t *Trunk) Streaming() bool { return len(t.order) > 0 }

// BeginPass serialises forward passes while the trunk streams.
func (t *Trunk) BeginPass() {
	if t.Streaming() {
		t.passMu.Lock()
	}
}

// EndPass ends a pass started with BeginPass.
func (t *Trunk) EndPass() {
	if t.Streaming() {
		t.passMu.Unlock()
	}
}

// Acquire returns the matrices of one layer part, waiting for its read.
func (t *Trunk) Acquire(ctx context.Context, layer int, part Part) (*LayerMats, error) {
	u := unit(layer, part)
	if m := t.pinned[u]; m != nil {
		t.hits.Add(1)
		return m, nil
	}
	t.streamed.Add(1)
	start := time.Now()
	defer func() { t.waitNanos.Add(int64(time.Since(start))) }()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	s := t.find(u)
	for s == nil {
		// The ring is not reading this part (the first pass, or a pass
		// after an error): restart the pipeline here. Slots still reading
		// something else cannot be interrupted; wait for them.
		t.next = t.pos[u]
		for _, sl := range t.slots {
			if sl.state == slotReady || sl.state == slotFailed {
				sl.state, sl.unit, sl.err = slotEmpty, -1, nil
			}
		}
		t.fill()
		if s = t.find(u); s != nil {
			break
		}
		if err := t.wait(ctx); err != nil {
			return nil, err
		}
		if t.closed {
			return nil, ErrClosed
		}
		s = t.find(u)
	}
	for s.state == slotLoading {
		if err := t.wait(ctx); err != nil {
			return nil, err
		}
	}
	if s.state == slotFailed {
		err := s.err
		s.state, s.unit, s.err = slotEmpty, -1, nil
		t.fill()
		return nil, err
	}
	s.state = slotBusy
	return &s.mats, nil
}

// Release frees a streamed part's slot for the next read.
func (t *Trunk) Release(layer int, part Part) {
	u := unit(layer, part)
	if t.pinned[u] != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.slots {
		if s.unit == u && s.state == slotBusy {
			s.state, s.unit = slotEmpty, -1
		}
	}
	t.fill()
}

func (t *Trunk) find(u int) *ringSlot {
	for _, s := range t.slots {
		if s.unit == u && s.state != slotEmpty {
			return s
		}
	}
	return nil
}

// wait releases t.mu until a read completes (or the trunk closes) or ctx
// is done, then takes t.mu again. Only the pass holding passMu waits, so a
// one-element signal channel cannot lose a wake-up: every completion leaves
// a signal behind, and the waiter re-checks the state after waking.
func (t *Trunk) wait(ctx context.Context) error {
	t.mu.Unlock()
	var err error
	select {
	case <-t.changed:
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.mu.Lock()
	return err
}

// signal wakes the waiter, if any. t.mu must be held.
func (t *Trunk) signal() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// fill starts reads into every empty slot, for the next parts in cyclic
// order that no slot already holds. t.mu must be held.
func (t *Trunk) fill() {
	if t.closed {
		return
	}
	for _, s := range t.slots {
		if s.state != slotEmpty {
			continue
		}
		// Skip parts already present (only possible when the ring is
		// larger than the number of streamed parts).
		var u int
		for tries := 0; ; tries++ {
			if tries == len(t.order) {
				return
			}
			u = t.order[t.next]
			t.next = (t.next + 1) % len(t.order)
			if t.find(u) == nil {
				break
			}
		}
		s.unit, s.state = u, slotLoading
		t.pending.Add(1)
		go t.load(s, u)
	}
}

// load reads one part into a slot and binds its matrices.
func (t *Trunk) load(s *ringSlot, u int) {
	defer t.pending.Done()
	pp := &t.plan.parts[u]
	start := time.Now()
	n, err := t.loader.load(t.ctx, pp, s.buf, s.stage, &s.run)
	if err != nil {
		err = fmt.Errorf("reading layer %d %s: %w", pp.layer, pp.part, err)
	}
	t.bytesRead.Add(n)
	t.streamedBytes.Add(n)
	el := int64(time.Since(start))
	t.readNanos.Add(el)
	if pp.comp != nil && err == nil {
		// Reading and decoding overlap, so ReadTime covers both; the
		// decode's own time is summed per block (core time).
		t.decodeNanos.Add(s.run.cpu.Load())
		t.decodedBytes.Add(pp.bytes)
	}
	if err == nil {
		bind(s.buf, pp.mats, &s.mats)
	}
	t.mu.Lock()
	if err != nil {
		s.state, s.err = slotFailed, err
	} else {
		s.state = slotReady
	}
	t.signal()
	t.mu.Unlock()
}

// TrunkStats are cumulative counters of the trunk.
type TrunkStats struct {
	BytesRead        int64         // pinned loads included
	StreamedBytes    int64         // reads of streamed parts
	ReadTime         time.Duration // summed over reads
	DecodeTime       time.Duration // decoding compressed parts, core time summed over blocks
	DecodedBytes     int64         // bytes decoded from a compressed pack
	WaitTime         time.Duration // compute blocked on a streamed part
	PinnedAcquires   int64         // layer parts used from resident buffers
	StreamedAcquires int64         // layer parts used from the streaming ring
}

// Stats returns the trunk's counters.
func (t *Trunk) Stats() TrunkStats {
	return TrunkStats{BytesRead: t.bytesRead.Load(), StreamedBytes: t.streamedBytes.Load(), ReadTime: time.Duration(t.readNanos.Load()),
		WaitTime:   time.Duration(t.waitNanos.Load()),
		DecodeTime: time.Duration(t.decodeNanos.Load()), DecodedBytes: t.decodedBytes.Load(), PinnedAcquires: t.hits.Load(), StreamedAcquires: t.streamed.Load()}
}

// Close stops the ring and waits for reads in flight, after which the
// buffers may be freed.
func (t *Trunk) Close() {
	t.mu.Lock()
	t.closed = true
	t.signal()
	t.mu.Unlock()
	t.cancel()
	t.pending.Wait()
	t.loader.close()
}
