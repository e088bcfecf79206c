package cache

// Policy decides which resident expert to evict. The cache owns the slots
// and their pin counts and tells the policy about every request and every
// change of a slot's state; the policy keeps whatever order it needs over
// the evictable slots (resident, loaded and unpinned).
//
// A slot moves through these states, and the cache calls:
//
//	empty --Insert--> pinned --Unpin--> evictable --Pin--> pinned
//	evictable --Victim--> empty         pinned --Remove--> empty (failed load)
//
// Access is called once per request before anything else, with the slot the
// key occupies (loaded or still loading) or -1 when it is absent.
//
// The cache calls a Policy with its lock held, from one goroutine at a time;
// an implementation needs no locking of its own, must not block, and must not
// call back into the cache. Implementations should be O(1) or O(log slots) per
// call and should not allocate after Reset. A Policy value serves one cache.
type Policy interface {
	// Reset prepares the policy for a cache of the given number of slots,
	// all empty. New calls it once.
	Reset(slots int)
	// Access records a request for key; slot is the key's slot, or -1.
	Access(key Key, slot int)
	// Insert records that key, absent, now occupies slot (pinned: its
	// load is in flight).
	Insert(slot int, key Key)
	// Pin records that an evictable slot gained a holder and may not be
	// evicted until Unpin.
	Pin(slot int)
	// Unpin records that slot lost its last holder and may be evicted.
	Unpin(slot int)
	// Remove records that a pinned slot was emptied without eviction
	// (its load failed).
	Remove(slot int)
	// Victim chooses an evictable slot, forgets it and returns it, or
	// returns -1 when no slot is evictable.
	Victim() int
}

// dlist is an intrusive doubly linked list over slot numbers; the front is
// the most recently used end.
type dlist struct {
	prev, next []int32
	head, tail int32
	n          int
}

func newDlist(n int) dlist {
	l := dlist{prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1}
	for i := range l.prev {
		l.prev[i], l.next[i] = -2, -2 // -2: not listed
	}
	return l
}

func (l *dlist) listed(s int32) bool { return l.prev[s] != -2 }

func (l *dlist) pushFront(s int32) {
	l.prev[s], l.next[s] = -1, l.head
	if l.head >= 0 {
		l.prev[l.head] = s
	} else {
		l.tail = s
	}
	l.head = s
	l.n++
}

func (l *dlist) remove(s int32) {
	p, n := l.prev[s], l.next[s]
	if p >= 0 {
		l.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.prev[s], l.next[s] = -2, -2
	l.n--
}

// LRU is plain least-recently-used eviction over the evictable slots, the
// reference engine's policy; it is here for comparison. A slot's recency is
// the time its last holder released it.
type LRU struct {
	l dlist
}

// NewLRU returns a least-recently-used policy.
func NewLRU() *LRU { return &LRU{} }

func (p *LRU) Reset(slots int) { p.l = newDlist(slots) }
func (p *LRU) Access(Key, int) {}
func (p *LRU) Insert(int, Key) {}
func (p *LRU) Pin(slot int)    { p.l.remove(int32(slot)) }
func (p *LRU) Unpin(slot int)  { p.l.pushFront(int32(slot)) }
func (p *LRU) Remove(int)      {}
func (p *LRU) Victim() int {
	s := p.l.tail
	if s < 0 {
		return -1
	}
	p.l.remove(s)
	return int(s)
}
