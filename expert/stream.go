package expert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/cache"
	"github.com/k3go/k3/internal/platform/crash"
	"github.com/k3go/k3/iox"
)

// ErrLoad reports a routed expert that could not be read: the step fails
// rather than run without it (a dropped expert still yields plausible
// tokens).
var ErrLoad = errors.New("expert load failed")

// ErrClosed reports a read stopped because the Stream was closed.
var ErrClosed = errors.New("closed")

// Stream reads routed experts on demand into a byte-budgeted cache
// (package cache) and multiplies them in place, packed: an expert is never
// dequantised and never copied after its read. A pass keeps a window of
// reads in flight ahead of the expert it computes; expert passes of
// different sessions take turns (the device is the bottleneck, and turns
// keep the pinned slots below the cache's size, so no pass can wait on
// another forever).
type Stream struct {
	index  *Index
	cache  atomic.Pointer[cache.Cache] // nil while suspended
	read   iox.ReadFunc
	window int // reads in flight per pass, below the cache's slots
	asked  int // the window NewStream was asked for

	statMu sync.Mutex  // guards base, and the swap of a cache into it
	base   cache.Stats // the counters of caches replaced by Resume

	phase sync.Mutex // one expert pass at a time

	fills   chan cache.Fill
	ctx     context.Context // reads run under it; cancelled by Close
	cancel  context.CancelFunc
	workers sync.WaitGroup

	bytesRead atomic.Int64
	waitNanos atomic.Int64
}

// streamBatch is a pass's state, kept in its ExpertBatch and reused.
type streamBatch struct {
	handles []*cache.Handle
	experts []Expert
	started int
}

// NewStream builds the expert source over an arena of slots × the index's
// slot size (arena may be nil: the cache allocates from the Go heap). topK
// is the experts one row uses: the cache needs at least topK+1 slots so
// that a pass can always make progress. window is the number of reads kept
// in flight per pass (zero: topK); it is capped below the number of slots.
func NewStream(x *Index, topK, slots int, arena []byte, read iox.ReadFunc, window int) (*Stream, error) {
	k := topK
	if slots < k+1 {
		return nil, fmt.Errorf("expert cache: needs at least %d slots, has %d", k+1, slots)
	}
	if window <= 0 {
		window = k
	}
	s := &Stream{index: x, read: read, asked: window, fills: make(chan cache.Fill, window)}
	if err := s.start(topK, slots, arena); err != nil {
		return nil, err
	}
	return s, nil
}

// start builds the cache over arena and starts the loaders.
func (s *Stream) start(topK, slots int, arena []byte) error {
	if slots < topK+1 {
		return fmt.Errorf("expert cache: needs at least %d slots, has %d", topK+1, slots)
	}
	c, err := cache.New(cache.Options{SlotSize: int(s.index.SlotBytes()), Arena: arena, MinSlots: topK + 1})
	if err != nil {
		return err
	}
	s.window = min(s.asked, c.Slots()-1)
	s.cache.Store(c)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for i := 0; i < s.window; i++ {
		s.workers.Add(1)
		go s.worker()
	}
	return nil
}

// Suspend waits for the expert pass running, if any, stops the loaders
// after their reads and drops the cache, so that its arena may be freed
// or lent (the engine moves between plans of one budget,
// planner.Residency); passes wait until Resume. Its counters carry on.
func (s *Stream) Suspend() {
	s.phase.Lock()
	s.cancel()
	s.workers.Wait()
	for len(s.fills) > 0 {
		<-s.fills // abandoned by their pass: nothing waits for them
	}
	s.statMu.Lock()
	s.base = addStats(s.base, s.cache.Swap(nil).Stats())
	s.statMu.Unlock()
}

// Resume gives a suspended Stream a new, empty cache of slots slots over
// arena (at least topK+1) and lets passes run again.
func (s *Stream) Resume(topK, slots int, arena []byte) error {
	if s.cache.Load() != nil {
		return errors.New("expert: Resume of a Stream that is not suspended")
	}
	if err := s.start(topK, slots, arena); err != nil {
		return err
	}
	s.phase.Unlock()
	return nil
}

// addStats sums two caches' counters; the sizes and gauges are b's.
func addStats(a, b cache.Stats) cache.Stats {
	b.Requests += a.Requests
	b.Hits += a.Hits
	b.InflightWaits += a.InflightWaits
	b.Misses += a.Misses
	b.Canceled += a.Canceled
	b.Evictions += a.Evictions
	b.LoadErrors += a.LoadErrors
	b.SlotWaits += a.SlotWaits
	b.BytesLoaded += a.BytesLoaded
	return b
}

// worker runs pending loads until Close.
func (s *Stream) worker() {
	defer s.workers.Done()
	for {
		select {
		case f := <-s.fills:
			f.Run(s.ctx, s.load)
		case <-s.ctx.Done():
			return
		}
	}
}

// load reads one expert into its slot (one request when its tensors form
// one run, as in the released checkpoint).
// A panic (a bug) becomes the load's error, which the pass that waits for
// the expert receives, instead of killing the process.
func (s *Stream) load(ctx context.Context, key cache.Key, slot []byte) (payload []byte, err error) {
	defer crash.Catch("the expert loader", &err)
	payload, err = s.index.Load(ctx, s.read, int(key.Layer), int(key.Expert), slot)
	if err == nil {
		s.bytesRead.Add(int64(len(payload)))
	}
	return payload, err
}

func (s *Stream) batch(b *Batch) *streamBatch {
	sb, _ := b.State.(*streamBatch)
	if sb == nil {
		sb = &streamBatch{}
		b.State = sb
	}
	if cap(sb.handles) < len(b.IDs) {
		sb.handles = make([]*cache.Handle, len(b.IDs), 2*len(b.IDs))
		sb.experts = make([]Expert, len(b.IDs), 2*len(b.IDs))
	}
	sb.handles, sb.experts = sb.handles[:len(b.IDs)], sb.experts[:len(b.IDs)]
	return sb
}

// Begin takes the pass's turn and starts the first window of reads.
func (s *Stream) Begin(ctx context.Context, b *Batch) error {
	s.phase.Lock()
	sb := s.batch(b)
	sb.started = 0
	clear(sb.handles)
	return s.topUp(ctx, b, sb, 0)
}

// topUp starts reads until the window ahead of expert i is full.
func (s *Stream) topUp(ctx context.Context, b *Batch, sb *streamBatch, i int) error {
	for sb.started < len(b.IDs) && sb.started < i+s.window {
		k := sb.started
		h, f, err := s.cache.Load().Start(ctx, cache.Key{Layer: int32(b.Layer), Expert: b.IDs[k]})
		if err != nil {
			return fmt.Errorf("expert %d: %w", b.IDs[k], err)
		}
		sb.handles[k] = h
		sb.started++
		if k < len(b.Uses) {
			// The policy sees one request per row that chose the expert.
			s.cache.Load().Touch(cache.Key{Layer: int32(b.Layer), Expert: b.IDs[k]}, int(b.Uses[k])-1)
		}
		if f.Pending() {
			select {
			case s.fills <- f:
			case <-s.ctx.Done():
				return ErrClosed
			}
		}
	}
	return nil
}

// Get waits for the batch's i-th expert and binds its matrices.
func (s *Stream) Get(ctx context.Context, b *Batch, i int) (*Expert, error) {
	sb := b.State.(*streamBatch)
	if err := s.topUp(ctx, b, sb, i); err != nil {
		return nil, err
	}
	h := sb.handles[i]
	if h == nil {
		return nil, fmt.Errorf("expert %d was not started", b.IDs[i])
	}
	start := time.Now()
	payload, err := h.Wait(ctx)
	s.waitNanos.Add(int64(time.Since(start)))
	if err != nil {
		switch {
		case errors.Is(err, context.Canceled) && s.ctx.Err() != nil:
			err = ErrClosed
		case ctx.Err() == nil:
			err = fmt.Errorf("%w: %w", ErrLoad, err)
		}
		return nil, err
	}
	s.index.Layout(b.Layer, int(b.IDs[i])).Bind(payload, &sb.experts[i].W)
	return &sb.experts[i], nil
}

// Put releases the batch's i-th expert and starts the next read.
func (s *Stream) Put(b *Batch, i int) {
	sb := b.State.(*streamBatch)
	if h := sb.handles[i]; h != nil {
		h.Release()
		sb.handles[i] = nil
	}
	sb.experts[i] = Expert{}
}

// End releases what the pass still holds and ends its turn.
func (s *Stream) End(b *Batch) {
	if sb, _ := b.State.(*streamBatch); sb != nil {
		for i, h := range sb.handles {
			if h != nil {
				h.Release()
				sb.handles[i] = nil
			}
		}
	}
	s.phase.Unlock()
}

// Resident implements Residency: whether the expert is in the cache
// already (no request is counted).
func (s *Stream) Resident(layer int, id int32) bool {
	c := s.cache.Load()
	return c != nil && c.Resident(cache.Key{Layer: int32(layer), Expert: id})
}

// StreamStats are a source's cumulative counters.
type StreamStats struct {
	BytesRead    int64
	Hits, Misses int64 // cache lookups; a wait for a read in flight is a miss
	Wait         time.Duration
}

// ExpertStats implements Stats.
func (s *Stream) ExpertStats() StreamStats {
	st := s.CacheStats()
	return StreamStats{BytesRead: s.bytesRead.Load(), Hits: st.Hits, Misses: st.Misses + st.InflightWaits, Wait: time.Duration(s.waitNanos.Load())}
}

// CacheStats returns the cache's counters, summed over the caches Resume
// replaced; sizes and gauges are the current cache's.
func (s *Stream) CacheStats() cache.Stats {
	s.statMu.Lock()
	defer s.statMu.Unlock()
	var cur cache.Stats
	if c := s.cache.Load(); c != nil {
		cur = c.Stats()
	}
	return addStats(s.base, cur)
}

// Close stops the loaders after reads in flight finish; the arena may then
// be freed.
func (s *Stream) Close() {
	s.cancel()
	s.workers.Wait()
}
