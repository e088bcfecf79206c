package trunk

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/platform/crash"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Trunk serves the dense weights of every layer part: pinned parts stay in
// memory; the others stream through a ring, the next parts read while the
// current one computes. Parts are used in a fixed cyclic order
// ((0, attention), (0, ffn), (1, attention), ... and around again for the
// next pass), so the ring always knows what to read next, including across
// the end of a pass. One forward pass at a time uses the trunk
// (BeginPass/EndPass); between passes, Replan moves it to another plan of
// the same budget (other parts pinned, another ring).
//
// The ring is one arena of the plan's ring bytes, not slots of the largest
// part: parts are placed at either end of it or after the last one placed
// (place), so a part is read as soon as there is room for it beside the
// parts not yet computed. At the floor the arena is one largest part, and the smaller
// parts (a 0.9 GB attention and a 0.4 GB MoE trunk beside a 1.45 GB dense
// MLP, on medium) still fit in pairs: the disk reads the next part while
// the current one computes, which fixed slots could only do with a second
// slot. Parts are read one at a time, in order (a read already keeps the
// disk's queue full); a compressed part decodes in place in its room, and
// the next part's reads start as soon as its reads are done, while its
// last blocks still decode.
type Trunk struct {
	lay    *Layout
	read   ReadFunc
	loader *partLoader
	pinned []*model.LayerMats // by unit; nil when streamed
	pinBuf [][]byte           // by unit: a pinned part's buffer
	order  []int              // streamed units in pass order
	pos    []int              // unit -> index in order, -1 if pinned
	arena  []byte             // the ring's memory
	runs   [2]decodeRun       // decodes of the loads in flight, reused

	passMu sync.Mutex // one pass at a time while streaming

	mu      sync.Mutex
	changed chan struct{} // a load completed, or the trunk closed
	parts   []ringPart    // by index in order, placed or not
	live    []*ringPart   // parts placed in the arena, in load order
	head    int64         // where the next part goes if it fits there
	next    int           // index in order of the next part to load
	reading bool          // a load's reads are in flight
	runBusy [2]bool       // runs[i] serves a load in flight
	holding bool          // Replan is draining the ring: start no load
	readEnd [2]bool       // runs[i]'s load has reported its reads done
	onRead  [2]func()     // runs[i]'s readsDone, bound once
	closed  bool
	ctx     context.Context // reads run under it; cancelled by Close
	cancel  context.CancelFunc
	pending sync.WaitGroup // loads in flight

	// Stats.
	bytesRead     atomic.Int64 // everything, pinned loads included
	streamedBytes atomic.Int64 // streamed reads only
	readNanos     atomic.Int64
	waitNanos     atomic.Int64
	hits          atomic.Int64 // acquires of pinned parts
	decodeNanos   atomic.Int64 // decoding compressed parts, summed over parts
	decodedBytes  atomic.Int64 // bytes produced by decoding
	streamed      atomic.Int64 // acquires of streamed parts
	ahead         atomic.Int64 // loads that started while another part was placed
	reloadBytes   atomic.Int64 // parts pinned again by Replan
	replans       atomic.Int64
}

type partState int

const (
	partLoading partState = iota
	partReady
	partBusy
	partFailed
)

// ringPart is one streamed part placed in the arena.
type ringPart struct {
	unit   int
	off, n int64 // arena bytes [off, off+n)
	state  partState
	mats   model.LayerMats
	err    error
}

// Alloc returns a buffer of n bytes for weights (the engine passes an
// aligned, off-heap allocator).
type Alloc = model.Alloc

// New reads the pinned parts of the plan mp now (mp.Pinned, by model.Unit)
// and sets up the ring of the rest (mp's ring bytes). alloc provides every
// buffer (pinned parts and the ring); nil means the Go heap.
func New(ctx context.Context, lay *Layout, mp *planner.MemoryPlan, read ReadFunc, alloc Alloc) (*Trunk, error) {
	if alloc == nil {
		alloc = func(n int64) ([]byte, error) { return make([]byte, n), nil }
	}
	n := len(lay.parts)
	if len(mp.Pinned) != n {
		return nil, fmt.Errorf("trunk: the memory plan covers %d parts, the model has %d", len(mp.Pinned), n)
	}
	t := &Trunk{lay: lay, read: read, loader: newPartLoader(lay, read), pinned: make([]*model.LayerMats, n), pinBuf: make([][]byte, n), pos: make([]int, n)}
	ok := false
	defer func() {
		if !ok {
			t.loader.close()
		}
	}()
	var pinRun decodeRun
	for i := range t.onRead {
		t.onRead[i] = func() {
			t.mu.Lock()
			t.readsDone(i)
			t.mu.Unlock()
		}
	}
	t.changed = make(chan struct{}, 1)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	if err := t.pin(ctx, mp, alloc, &pinRun); err != nil {
		return nil, err
	}
	if err := t.setRing(mp, alloc); err != nil {
		return nil, err
	}
	ok = true
	return t, nil
}

// pin reads every part mp pins that is not pinned yet into a buffer of its
// own.
func (t *Trunk) pin(ctx context.Context, mp *planner.MemoryPlan, alloc Alloc, run *decodeRun) error {
	for u := range t.lay.parts {
		if !mp.Pinned[u] || t.pinned[u] != nil {
			continue
		}
		pp := &t.lay.parts[u]
		buf, err := alloc(pp.room())
		if err != nil {
			return fmt.Errorf("pinning layer %d %s: %w", pp.Layer, pp.Part, err)
		}
		t.pinBuf[u] = buf
		n, err := t.loader.load(ctx, pp, buf, run, nil)
		t.bytesRead.Add(n)
		if err != nil {
			return fmt.Errorf("layer %d %s: %w", pp.Layer, pp.Part, err)
		}
		t.pinned[u] = new(model.LayerMats)
		pp.Bind(buf, t.pinned[u])
	}
	return nil
}

// setRing makes every part mp does not pin stream, in pass order, through
// a ring of the plan's bytes.
func (t *Trunk) setRing(mp *planner.MemoryPlan, alloc Alloc) error {
	t.order = t.order[:0]
	for u := range t.lay.parts {
		t.pos[u] = -1
		if mp.Pinned[u] {
			continue
		}
		t.pos[u] = len(t.order)
		t.order = append(t.order, u)
	}
	t.arena, t.parts, t.live, t.next, t.head = nil, nil, nil, 0, 0
	if len(t.order) == 0 {
		return nil
	}
	size := int64(mp.RingSlots) * mp.RingSlotBytes
	for _, u := range t.order {
		if n := t.room(u); n > size {
			pp := &t.lay.parts[u]
			return fmt.Errorf("trunk: layer %d %s streams (%d bytes) but the plan's ring has %d bytes", pp.Layer, pp.Part, n, size)
		}
	}
	buf, err := alloc(size)
	if err != nil {
		return fmt.Errorf("trunk ring: %w", err)
	}
	t.arena = buf
	t.parts = make([]ringPart, len(t.order))
	t.live = make([]*ringPart, 0, len(t.order))
	return nil
}

// Replan moves the trunk to another plan of the same budget between
// passes (planner.Residency): it waits for the ring's reads in flight,
// gives back (free) the ring and the buffers of the parts mp no longer
// pins, then reads the parts mp pins that were streamed, and sets up mp's
// ring; parts pinned in both stay where they are, unread. Everything is
// given back before anything is allocated, so the process never holds
// both plans' buffers. It must be called by the caller that runs passes,
// with none running. On an error the trunk is left without the failed
// parts and ring: Replan again (to any plan) before the next pass.
func (t *Trunk) Replan(ctx context.Context, mp *planner.MemoryPlan, alloc Alloc, free func([]byte)) error {
	if len(mp.Pinned) != len(t.lay.parts) {
		return fmt.Errorf("trunk: the memory plan covers %d parts, the model has %d", len(mp.Pinned), len(t.lay.parts))
	}
	t.passMu.Lock()
	defer t.passMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	t.holding = true
	t.mu.Unlock()
	t.pending.Wait() // the ring's loads in flight end; fill starts no other
	t.mu.Lock()
	defer t.mu.Unlock()
	t.holding = false
	t.replans.Add(1)
	if t.arena != nil {
		free(t.arena)
		t.arena = nil
	}
	t.parts, t.live = nil, nil
	t.runBusy, t.readEnd, t.reading = [2]bool{}, [2]bool{}, false
	for u, m := range t.pinned {
		if m != nil && !mp.Pinned[u] {
			free(t.pinBuf[u])
			t.pinned[u], t.pinBuf[u] = nil, nil
		}
	}
	before := t.bytesRead.Load()
	var run decodeRun
	err := t.pin(ctx, mp, alloc, &run)
	t.reloadBytes.Add(t.bytesRead.Load() - before)
	if err != nil {
		return err
	}
	return t.setRing(mp, alloc)
}

// room is the arena bytes part u takes: its buffer, aligned so that the
// next part's direct reads land on an aligned address.
func (t *Trunk) room(u int) int64 { return iox.AlignUp(t.lay.parts[u].room()) }

// Streaming reports whether any part streams.
func (t *Trunk) Streaming() bool { return len(t.order) > 0 }

// BeginPass serialises forward passes: a streaming trunk's ring serves one
// pass at a time, and Replan may change whether it streams between
// passes. (The engine runs one pass at a time anyway: the batcher's.)
func (t *Trunk) BeginPass() { t.passMu.Lock() }

// EndPass ends a pass started with BeginPass.
func (t *Trunk) EndPass() { t.passMu.Unlock() }

// Acquire returns the matrices of one layer part, waiting for its read.
func (t *Trunk) Acquire(ctx context.Context, layer int, part model.Part) (*model.LayerMats, error) {
	u := model.Unit(layer, part)
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
	rp := t.find(u)
	for rp == nil {
		// The ring is not reading this part (the first pass, or a pass
		// after an error): restart the pipeline here. A load in flight
		// cannot be interrupted; wait for it.
		t.restart(u)
		t.fill()
		if rp = t.find(u); rp != nil {
			break
		}
		if err := t.wait(ctx); err != nil {
			return nil, err
		}
		if t.closed {
			return nil, ErrClosed
		}
		rp = t.find(u)
	}
	for rp.state == partLoading {
		if err := t.wait(ctx); err != nil {
			return nil, err
		}
	}
	if rp.state == partFailed {
		err := rp.err
		t.remove(rp)
		t.fill()
		return nil, err
	}
	rp.state = partBusy
	return &rp.mats, nil
}

// Release frees a streamed part's room for the next reads.
func (t *Trunk) Release(layer int, part model.Part) {
	u := model.Unit(layer, part)
	if t.pinned[u] != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rp := t.find(u); rp != nil && rp.state == partBusy {
		t.remove(rp)
	}
	t.fill()
}

// find returns the placed part u, nil if none. t.mu must be held.
func (t *Trunk) find(u int) *ringPart {
	for _, rp := range t.live {
		if rp.unit == u {
			return rp
		}
	}
	return nil
}

// remove takes a part out of the arena. t.mu must be held.
func (t *Trunk) remove(rp *ringPart) {
	for i, x := range t.live {
		if x == rp {
			t.live = append(t.live[:i], t.live[i+1:]...)
			return
		}
	}
}

// restart points the ring at part u: the parts read ahead for another
// order are dropped (none is in use: a pass holds one part at a time and
// releases it before acquiring the next). t.mu must be held.
func (t *Trunk) restart(u int) {
	t.next = t.pos[u]
	kept := t.live[:0]
	for _, rp := range t.live {
		if rp.state == partLoading || rp.state == partBusy {
			kept = append(kept, rp)
		}
	}
	clear(t.live[len(kept):])
	t.live = kept
}

// place finds room for n bytes where no placed part overlaps it: at
// either end of the arena, else right after the last part placed. Ends
// first, because parts are freed in the order they were placed: a small
// part put at the far end from the part still computing leaves the whole
// rest of the arena to the next large part once that one is released (a
// small part placed right after it would leave a gap a few pages too
// short). t.mu must be held.
func (t *Trunk) place(n int64) (int64, bool) {
	a := int64(len(t.arena))
	for _, off := range [3]int64{0, iox.AlignDown(a - n), t.head} {
		if off < 0 || off+n > a {
			continue
		}
		free := true
		for _, rp := range t.live {
			if off < rp.off+rp.n && rp.off < off+n {
				free = false
				break
			}
		}
		if free {
			return off, true
		}
	}
	return 0, false
}

// claim places part u at off. t.mu must be held.
func (t *Trunk) claim(u int, off int64) *ringPart {
	rp := &t.parts[t.pos[u]]
	*rp = ringPart{unit: u, off: off, n: t.room(u), state: partLoading, mats: rp.mats}
	if len(t.live) > 0 {
		t.ahead.Add(1)
	}
	t.live = append(t.live, rp)
	t.head = off + rp.n
	return rp
}

// wait releases t.mu until a load completes (or the trunk closes) or ctx
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

// fill starts the load of the next part in cyclic order that is not
// placed, once no other load is reading and there is room for it. t.mu
// must be held.
func (t *Trunk) fill() {
	if t.closed || t.reading || t.holding {
		return
	}
	run := 0
	if t.runBusy[0] {
		if run = 1; t.runBusy[1] {
			return // the last finishing load calls fill again
		}
	}
	var u int
	for tries := 0; ; tries++ {
		if tries == len(t.order) {
			return // every streamed part is placed
		}
		u = t.order[t.next]
		if t.find(u) == nil {
			break
		}
		t.next = (t.next + 1) % len(t.order)
	}
	off, ok := t.place(t.room(u))
	if !ok {
		return // a Release will make room
	}
	t.next = (t.next + 1) % len(t.order)
	rp := t.claim(u, off)
	t.reading, t.runBusy[run], t.readEnd[run] = true, true, false
	t.pending.Add(1)
	go t.load(rp, time.Now(), run)
}

// load runs one load and records its result in its part.
func (t *Trunk) load(rp *ringPart, start time.Time, run int) {
	defer t.pending.Done()
	pp := &t.lay.parts[rp.unit]
	buf := t.arena[rp.off : rp.off+rp.n]
	n, err := t.loadPart(pp, buf, run)
	t.bytesRead.Add(n)
	t.streamedBytes.Add(n)
	t.readNanos.Add(int64(time.Since(start)))
	if err != nil {
		err = fmt.Errorf("reading layer %d %s: %w", pp.Layer, pp.Part, err)
	} else {
		if pp.comp != nil {
			// Reading and decoding overlap, so ReadTime covers both;
			// the decode's own time is summed per block (core time).
			t.decodeNanos.Add(t.runs[run].cpu.Load())
			t.decodedBytes.Add(pp.Bytes)
		}
		pp.Bind(buf, &rp.mats)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runBusy[run] = false
	if err != nil {
		rp.state, rp.err = partFailed, err
	} else {
		rp.state = partReady
	}
	t.readsDone(run)
	t.fill()
	t.signal()
}

// loadPart runs the part's load; a panic (a bug) becomes the load's error,
// which the pass that acquires the part receives, instead of killing the
// process.
func (t *Trunk) loadPart(pp *part, buf []byte, run int) (n int64, err error) {
	defer crash.Catch("the trunk's part loader", &err)
	return t.loader.load(t.ctx, pp, buf, &t.runs[run], t.onRead[run])
}

// readsDone records, once per load, that runs[run]'s reads are over, and
// lets the next part's reads start. t.mu must be held.
func (t *Trunk) readsDone(run int) {
	if !t.readEnd[run] {
		t.readEnd[run], t.reading = true, false
		t.fill()
	}
}

// TrunkStats are cumulative counters of the trunk.
type TrunkStats struct {
	BytesRead        int64         // pinned loads included
	StreamedBytes    int64         // reads of streamed parts
	ReadTime         time.Duration // summed over reads
	DecodeTime       time.Duration // decoding compressed parts, core time summed over blocks
	DecodedBytes     int64         // bytes decoded from a compressed pack
	WaitTime         time.Duration // compute blocked on a streamed part
	LoadsAhead       int64         // streamed loads that started while an earlier part was still placed (overlapping its compute)
	Replans          int64         // moves to another plan (Replan)
	ReloadedBytes    int64         // parts read again to be pinned by Replan (in BytesRead, not StreamedBytes)
	PinnedAcquires   int64         // layer parts used from resident buffers
	StreamedAcquires int64         // layer parts used from the streaming ring
}

// Stats returns the trunk's counters.
func (t *Trunk) Stats() TrunkStats {
	return TrunkStats{BytesRead: t.bytesRead.Load(), StreamedBytes: t.streamedBytes.Load(), ReadTime: time.Duration(t.readNanos.Load()),
		WaitTime:   time.Duration(t.waitNanos.Load()),
		DecodeTime: time.Duration(t.decodeNanos.Load()), DecodedBytes: t.decodedBytes.Load(), PinnedAcquires: t.hits.Load(), StreamedAcquires: t.streamed.Load(), LoadsAhead: t.ahead.Load(),
		Replans: t.replans.Load(), ReloadedBytes: t.reloadBytes.Load()}
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
