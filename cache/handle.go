package cache

import (
	"context"
	"fmt"
	"unsafe"
)

// Handle pins one expert in the cache. A handle belongs to one holder at a
// time (it may be handed to another goroutine, not shared by two at once),
// must be released exactly once, and must not be used afterwards.
type Handle struct {
	c       *Cache
	slot    int32 // -1 once detached by a failed load
	key     Key
	waiting bool
	err     error
	payload []byte
	ready   chan struct{} // capacity 1, reused across the handle's lives
	prev    *Handle
	next    *Handle
}

// Key reports the handle's key.
func (h *Handle) Key() Key { return h.key }

// Bytes returns the expert's payload, or nil before a successful Wait (or
// Get). The bytes stay valid, and unchanged, until Release.
func (h *Handle) Bytes() []byte { return h.payload }

// Fill is the right to run one pending load, returned by Start and passed
// by Prefetch. It is a small value; copies refer to the same load, which
// runs at most once. The zero Fill means nothing to load.
type Fill struct {
	c    *Cache
	slot int32
	gen  uint32
}

// Pending reports whether f stands for a load (it is not the zero Fill).
func (f Fill) Pending() bool { return f.c != nil }

// Run reads the expert with load into its reserved slot and publishes it to
// every holder, waking those waiting. It returns load's error, which every
// holder also gets, wrapped with the key (and with ErrLoadAbandoned when ctx
// ended, so that others can retry). Run returns ErrNotLoader for the zero
// Fill, for a Fill already run, and for one whose load was abandoned
// (its reserving handle released first); it then reads nothing.
func (f Fill) Run(ctx context.Context, load Loader) error {
	c := f.c
	if c == nil {
		return ErrNotLoader
	}
	c.mu.Lock()
	sm := &c.slots[f.slot]
	if sm.gen != f.gen || sm.state != stateLoading || sm.running {
		c.mu.Unlock()
		return ErrNotLoader
	}
	sm.running, sm.owner = true, nil
	key := sm.key
	mem := c.slotMem(f.slot)
	c.mu.Unlock()

	payload, err := load(ctx, key, mem)
	if err == nil && !within(payload, mem) {
		err = fmt.Errorf("cache: loader for %v returned %d bytes that are not inside its %d-byte slot", key, len(payload), len(mem))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		werr := fmt.Errorf("cache: loading %v: %w", key, err)
		if ctx.Err() != nil {
			werr = fmt.Errorf("cache: loading %v: %w: %w", key, ErrLoadAbandoned, err)
		}
		c.failSlot(f.slot, werr)
		return err
	}
	sm.state, sm.payload, sm.running = stateReady, payload, false
	c.st.BytesLoaded += int64(len(payload))
	c.st.Loading--
	c.st.Resident++
	if sm.holders.head == nil { // every requester left: keep it as a prefetched expert
		c.policy.Unpin(int(f.slot))
		c.wakeSlotWaiters()
	}
	for w := sm.holders.head; w != nil; w = w.next {
		if w.waiting {
			w.signal() // each holder picks up the payload in its own Wait
		}
	}
	return nil
}

func within(p, mem []byte) bool {
	if len(p) == 0 {
		return true
	}
	ps := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	ms := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	return ps >= ms && ps-ms <= uintptr(len(mem)) && uintptr(len(p)) <= uintptr(len(mem))-(ps-ms)
}

// Wait blocks until the expert is loaded and returns its payload, or
// returns the load's error, or ctx's error if ctx ends first (the handle
// stays pinned: Release it).
func (h *Handle) Wait(ctx context.Context) ([]byte, error) {
	if h.payload != nil {
		return h.payload, nil
	}
	c := h.c
	c.mu.Lock()
	for {
		if h.err != nil {
			err := h.err
			c.mu.Unlock()
			return nil, err
		}
		if sm := &c.slots[h.slot]; sm.state == stateReady {
			h.payload = sm.payload
			c.mu.Unlock()
			return h.payload, nil
		}
		if err := ctx.Err(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		h.waiting = true
		c.mu.Unlock()
		select {
		case <-h.ready:
		case <-ctx.Done():
		}
		c.mu.Lock()
		h.waiting = false
		h.drain()
	}
}

// Release unpins the expert. Releasing the handle that reserved a slot
// before its Fill has started abandons the load: other holders get
// ErrLoadAbandoned and the Fill, if run later, reads nothing.
func (h *Handle) Release() {
	c := h.c
	if c == nil {
		panic("cache: Handle released twice")
	}
	c.mu.Lock()
	if s := h.slot; s >= 0 {
		sm := &c.slots[s]
		if sm.owner == h && sm.state == stateLoading && !sm.running {
			c.failSlot(s, fmt.Errorf("cache: loading %v: %w: released before its Fill ran", h.key, ErrLoadAbandoned))
		} else {
			sm.holders.remove(h)
			if sm.owner == h {
				sm.owner = nil
			}
			if sm.holders.head == nil {
				c.st.Pinned--
				if sm.state == stateReady {
					c.policy.Unpin(int(s))
					c.wakeSlotWaiters()
				}
			}
		}
	}
	c.putHandle(h)
	c.mu.Unlock()
}

func (h *Handle) signal() {
	select {
	case h.ready <- struct{}{}:
	default:
	}
}

func (h *Handle) drain() {
	select {
	case <-h.ready:
	default:
	}
}

// hlist is an intrusive doubly linked list of handles.
type hlist struct{ head *Handle }

func (l *hlist) push(h *Handle) {
	h.prev, h.next = nil, l.head
	if l.head != nil {
		l.head.prev = h
	}
	l.head = h
}

func (l *hlist) remove(h *Handle) {
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		l.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	}
	h.prev, h.next = nil, nil
}
