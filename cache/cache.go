package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Align is the alignment of every slot start relative to the arena start,
// and the granularity of the slot stride (O_DIRECT needs 4096).
const Align = 4096

var (
	// ErrBudget reports a budget or arena too small for Options.MinSlots.
	ErrBudget = errors.New("cache: budget too small")
	// ErrLoadAbandoned is returned to the holders of an expert whose load
	// did not complete because its loader gave up: the loading request's
	// context ended, or the handle that reserved the slot was released
	// before its Fill ran. Get retries such a load itself when its own
	// context is still live.
	ErrLoadAbandoned = errors.New("cache: load abandoned")
	// ErrNotLoader is returned by Fill.Run for a Fill that has nothing
	// (left) to load: the zero Fill, one already run, or one abandoned.
	ErrNotLoader = errors.New("cache: no pending load")
)

// Loader reads key's expert into slot, which is Stride bytes of the arena
// starting Align-aligned (when the arena is), and returns the payload: a
// sub-slice of slot, which may start at an offset (an O_DIRECT read starts
// at an aligned window). It must honour ctx.
type Loader func(ctx context.Context, key Key, slot []byte) (payload []byte, err error)

// Options configures New. SlotSize and one of Budget or Arena are required.
type Options struct {
	// SlotSize is the most bytes one load may use: the expert's size plus
	// whatever the loader needs to align its read (for O_DIRECT, the payload
	// plus 8 KiB). Slots are laid out with stride SlotSize rounded up to
	// Align.
	SlotSize int
	// Budget is the arena size in bytes; the cache has Budget / stride
	// slots. With Arena set, 0 means use all of it.
	Budget int64
	// Arena, if non-nil, is the caller's memory for the slots (for example
	// an aligned off-heap mapping for O_DIRECT). Slot starts are
	// Align-aligned when the arena's start is. The cache never frees it.
	Arena []byte
	// Alloc, used when Arena is nil, returns n bytes for the arena. Nil
	// means a Go allocation whose start is aligned to Align.
	Alloc func(n int) ([]byte, error)
	// MinSlots makes New fail with ErrBudget when the budget holds fewer
	// slots. The cache itself works with one slot, but a request waits
	// while every slot is pinned, so the engine needs at least one slot
	// more than the handles it holds at once: TopK+1 (17 for Kimi K3).
	MinSlots int
	// Policy chooses victims; nil means NewAdaptive(AdaptiveOptions{}).
	Policy Policy
}

// Cache is a byte-budgeted cache of expert weights in fixed-size slots of
// one arena. It is safe for concurrent use. See the package documentation.
type Cache struct {
	mu       sync.Mutex
	policy   Policy
	arena    []byte
	stride   int
	slots    []slotMeta
	index    keyIndex
	free     []int32
	spare    *Handle // released handles, linked through next
	slotWait hlist   // requests waiting for a slot
	st       Stats
}

const (
	stateEmpty uint8 = iota
	stateLoading
	stateReady
)

type slotMeta struct {
	key     Key
	state   uint8
	running bool    // the Fill of a loading slot has started
	gen     uint32  // bumped at every reservation; a stale Fill sees it
	owner   *Handle // reserved the slot; releasing it before the Fill runs abandons the load
	payload []byte
	holders hlist // every handle pinning the slot
}

// New returns a cache with the given options.
func New(opts Options) (*Cache, error) {
	if opts.SlotSize <= 0 {
		return nil, fmt.Errorf("cache: Options.SlotSize %d must be positive", opts.SlotSize)
	}
	if opts.Budget < 0 {
		return nil, fmt.Errorf("cache: Options.Budget %d is negative", opts.Budget)
	}
	stride := (opts.SlotSize + Align - 1) &^ (Align - 1)
	var n int64
	switch {
	case opts.Arena != nil:
		n = int64(len(opts.Arena) / stride)
		if opts.Budget > 0 {
			n = min(n, opts.Budget/int64(stride))
		}
	case opts.Budget > 0:
		n = opts.Budget / int64(stride)
	default:
		return nil, errors.New("cache: Options needs a Budget or an Arena")
	}
	if n < int64(max(1, opts.MinSlots)) {
		return nil, fmt.Errorf("cache: %d slots of %d bytes fit, need at least %d: %w", n, stride, max(1, opts.MinSlots), ErrBudget)
	}
	if n > 1<<30 {
		return nil, fmt.Errorf("cache: %d slots is too many", n)
	}
	arena := opts.Arena
	if arena == nil {
		size := int(n) * stride
		var err error
		if opts.Alloc != nil {
			arena, err = opts.Alloc(size)
		} else {
			arena = alignedAlloc(size)
		}
		if err != nil {
			return nil, fmt.Errorf("cache: allocating %d-byte arena: %w", size, err)
		}
		if len(arena) < size {
			return nil, fmt.Errorf("cache: Options.Alloc returned %d bytes, asked %d", len(arena), size)
		}
	}
	c := &Cache{
		policy: opts.Policy,
		arena:  arena,
		stride: stride,
		slots:  make([]slotMeta, n),
		index:  newKeyIndex(int(n)),
		free:   make([]int32, n),
	}
	if c.policy == nil {
		c.policy = NewAdaptive(AdaptiveOptions{})
	}
	c.policy.Reset(int(n))
	for i := range c.free {
		c.free[i] = int32(int(n) - 1 - i)
	}
	c.st.Slots, c.st.Stride = int(n), stride
	return c, nil
}

func alignedAlloc(size int) []byte {
	b := make([]byte, size+Align-1)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (Align - 1))
	return b[off : off+size : off+size]
}

// Slots reports the number of slots.
func (c *Cache) Slots() int { return len(c.slots) }

// Stride reports the distance in bytes between slot starts (SlotSize
// rounded up to Align), which is the length of the slice a Loader gets.
func (c *Cache) Stride() int { return c.stride }

func (c *Cache) slotMem(s int32) []byte {
	off := int(s) * c.stride
	return c.arena[off : off+c.stride : off+c.stride]
}

// Get returns a pinned handle on key's payload, loading it with load into a
// free or evicted slot when it is not resident. A request for an expert
// whose load is in flight waits for that load instead of starting another;
// when every slot is pinned or loading, Get waits for one to be released.
// Both waits end early with ctx's error. If the load fails, every request
// waiting on it gets the error (wrapped) and the next request retries.
//
// The caller must Release the handle when done with the bytes.
func (c *Cache) Get(ctx context.Context, key Key, load Loader) (*Handle, error) {
	count := true
	for {
		h, f, err := c.start(ctx, key, count)
		if err != nil {
			return nil, err
		}
		count = false
		if f.Pending() {
			f.Run(ctx, load) // a failure reaches h, wrapped with the key
		}
		if _, err := h.Wait(ctx); err != nil {
			h.Release()
			if errors.Is(err, ErrLoadAbandoned) && ctx.Err() == nil {
				continue // someone else's load gave up: load it ourselves
			}
			return nil, err
		}
		return h, nil
	}
}

// Start pins key without waiting for I/O and returns its handle: at once
// when key is resident or being loaded, after reserving a slot (which may
// wait, like Get, for a slot to be released) when it is not. In the last
// case it also returns the pending load as a Fill, which the caller must Run
// (on whatever goroutine it likes); otherwise the Fill is the zero value.
// The caller must Release the handle in every case; releasing it before the
// Fill has started abandons the load.
func (c *Cache) Start(ctx context.Context, key Key) (*Handle, Fill, error) {
	return c.start(ctx, key, true)
}

// Prefetch starts a request for every key as Start does, in order, storing
// the handles in hs (which must be at least as long as keys), and passes
// each pending load to submit as soon as its slot is reserved; submit must
// arrange for the Fill to Run (on an I/O goroutine, say, or inline). The
// cache starts no goroutines. Duplicate keys share one load. The caller then
// Waits on each handle as it needs it, and Releases them all. If ctx ends
// while waiting for a slot, Prefetch releases the handles it started, clears
// hs and returns the error; of the loads it submitted, those already running
// complete and stay cached, the others are abandoned (their Fill does
// nothing).
//
// Every handle pins a slot, so the cache needs more slots than the handles
// all callers hold at once, or Prefetch waits for ctx to end.
func (c *Cache) Prefetch(ctx context.Context, keys []Key, hs []*Handle, submit func(Fill)) error {
	if len(hs) < len(keys) {
		return fmt.Errorf("cache: Prefetch with %d handles for %d keys", len(hs), len(keys))
	}
	for i, k := range keys {
		h, f, err := c.start(ctx, k, true)
		if err != nil {
			for j := range i {
				hs[j].Release()
				hs[j] = nil
			}
			return err
		}
		hs[i] = h
		if f.Pending() {
			submit(f)
		}
	}
	return nil
}

// Resident reports whether key's expert is loaded and ready. It counts no
// request and pins nothing: a pass uses it to take the experts it already
// has first, while the reads of the others run.
func (c *Cache) Resident(key Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.index.get(key)
	return ok && c.slots[s].state == stateReady
}

// Touch tells the policy of n more requests for key, beyond the one its
// Start counted: a batched pass fetches an expert once for every row that
// chose it, and the policy should see the demand of every row. It neither
// pins nor loads, and leaves Stats unchanged.
func (c *Cache) Touch(key Key, n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	slot := -1
	if s, ok := c.index.get(key); ok {
		slot = int(s)
	}
	for range n {
		c.policy.Access(key, slot)
	}
}

func (c *Cache) start(ctx context.Context, key Key, count bool) (*Handle, Fill, error) {
	c.mu.Lock()
	accessed := !count
	waited := false
	var h *Handle
	for {
		if s, ok := c.index.get(key); ok {
			if !accessed {
				c.policy.Access(key, int(s))
			}
			sm := &c.slots[s]
			if h == nil {
				h = c.newHandle()
			}
			h.key, h.slot = key, s
			if sm.holders.head == nil {
				if sm.state == stateReady {
					c.policy.Pin(int(s))
				}
				c.st.Pinned++
			}
			sm.holders.push(h)
			if sm.state == stateReady {
				h.payload = sm.payload
			}
			if count {
				c.st.Requests++
				if sm.state == stateReady {
					c.st.Hits++
				} else {
					c.st.InflightWaits++
				}
			}
			c.mu.Unlock()
			return h, Fill{}, nil
		}
		if !accessed {
			c.policy.Access(key, -1)
			accessed = true
		}
		if s := c.takeSlot(); s >= 0 {
			if h == nil {
				h = c.newHandle()
			}
			sm := &c.slots[s]
			sm.gen++
			sm.key, sm.state, sm.payload, sm.running, sm.owner = key, stateLoading, nil, false, h
			c.index.put(key, s)
			h.key, h.slot = key, s
			sm.holders.push(h)
			c.st.Pinned++
			c.st.Loading++
			c.policy.Insert(int(s), key)
			if count {
				c.st.Requests++
				c.st.Misses++
			}
			c.mu.Unlock()
			return h, Fill{c: c, slot: s, gen: sm.gen}, nil
		}
		// Every slot is pinned or loading: wait for a release.
		if h == nil {
			h = c.newHandle()
		}
		if !waited && count {
			c.st.SlotWaits++
		}
		waited = true
		if err := ctx.Err(); err != nil {
			return nil, Fill{}, c.abandonStart(h, count, err)
		}
		c.slotWait.push(h)
		h.waiting = true
		c.mu.Unlock()
		select {
		case <-h.ready:
		case <-ctx.Done():
		}
		c.mu.Lock()
		if h.waiting {
			c.slotWait.remove(h)
			h.waiting = false
		}
		h.drain()
		if err := ctx.Err(); err != nil {
			return nil, Fill{}, c.abandonStart(h, count, err)
		}
	}
}

// abandonStart ends a start that gave up waiting for a slot; c.mu is held
// and released.
func (c *Cache) abandonStart(h *Handle, count bool, err error) error {
	if count {
		c.st.Requests++
		c.st.Canceled++
	}
	c.putHandle(h)
	c.mu.Unlock()
	return err
}

// takeSlot returns a free slot, or evicts the policy's victim, or returns -1.
func (c *Cache) takeSlot() int32 {
	if n := len(c.free); n > 0 {
		s := c.free[n-1]
		c.free = c.free[:n-1]
		return s
	}
	v := c.policy.Victim()
	if v < 0 {
		return -1
	}
	sm := &c.slots[v]
	if sm.state != stateReady || sm.holders.head != nil {
		panic(fmt.Sprintf("cache: policy chose slot %d, which is not evictable", v))
	}
	c.index.del(sm.key)
	sm.state, sm.payload = stateEmpty, nil
	c.st.Evictions++
	c.st.Resident--
	return int32(v)
}

// failSlot empties a loading slot whose load failed or was abandoned and
// detaches every holder with err. c.mu is held.
func (c *Cache) failSlot(s int32, err error) {
	sm := &c.slots[s]
	c.index.del(sm.key)
	c.policy.Remove(int(s))
	sm.state, sm.payload, sm.running, sm.owner = stateEmpty, nil, false, nil
	sm.gen++
	c.st.LoadErrors++
	c.st.Loading--
	if sm.holders.head != nil {
		c.st.Pinned--
	}
	for h := sm.holders.head; h != nil; {
		next := h.next
		h.prev, h.next = nil, nil
		h.slot = -1
		h.err = err
		if h.waiting {
			h.signal()
		}
		h = next
	}
	sm.holders.head = nil
	c.free = append(c.free, s)
	c.wakeSlotWaiters()
}

func (c *Cache) wakeSlotWaiters() {
	for h := c.slotWait.head; h != nil; {
		next := h.next
		c.slotWait.remove(h)
		h.waiting = false
		h.signal()
		h = next
	}
}

func (c *Cache) newHandle() *Handle {
	h := c.spare
	if h == nil {
		return &Handle{c: c, ready: make(chan struct{}, 1)}
	}
	c.spare = h.next
	h.next = nil
	h.c = c
	return h
}

func (c *Cache) putHandle(h *Handle) {
	h.drain()
	*h = Handle{ready: h.ready, next: c.spare}
	c.spare = h
}
