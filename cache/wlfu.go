package cache

import "math"

// wlfu is the core of the shipped policy: a recency window in front of a
// frequency-ordered main region, with
//
//   - scores that count requests and decay per model cycle (a pass over the
//     layers), kept in log2 form relative to cycle 0 so that decay never
//     reorders them: v = log2(Σ 2^(cycle_i/halfLife));
//   - ghost scores for keys that were evicted (a bounded history table), so
//     an expert that returns is judged by its past;
//   - hysteresis: an expert loaded on a miss enters the main region ranked by
//     the score it had before that miss, and loses ties, so a newcomer
//     displaces an incumbent only when its history is strictly better. On a
//     cyclic scan larger than the cache this keeps a stable resident set
//     instead of flushing it the way LRU does;
//   - protection of the current layer run: experts requested since the layer
//     last changed stay in the window (a step of several positions reuses
//     them within the run) and are evicted only when nothing else is.
//
// The window's target size w (slots) is set by the caller; w = slots gives
// exactly LRU, w = 0 a pure frequency cache. Adaptive picks w online.
type wlfu struct {
	n     int
	w     float64 // window target in slots
	lam   float64 // 1 / half-life in cycles
	now   float64 // lam * cycle
	cycle int64
	t     int64 // request counter (tie-breaks)
	run   int64 // layer-run counter

	lastLayer     int32
	minL, maxL    int32
	sawLayer      bool
	key           []Key
	kv, fv        []float64 // ranking score (lags, see above) and full score
	at, runOf     []int64
	prob          []bool // loaded on a miss and not yet hit outside its run
	inWin, pinned []bool
	used          []bool
	winCount      int // window members, pinned ones included
	win           dlist
	heap          []hent // evictable main members, min-heap on (kv, prob, -at)
	hidx          []int32
	hist          history
}

const (
	defaultHalfLife = 8 // cycles
	historyPerSlot  = 4 // ghost entries per slot
	minHistorySize  = 64
)

func (p *wlfu) reset(slots int, halfLife float64, window float64) {
	if halfLife <= 0 {
		halfLife = defaultHalfLife
	}
	*p = wlfu{
		n: slots, w: window, lam: 1 / halfLife, lastLayer: math.MinInt32,
		key: make([]Key, slots), kv: make([]float64, slots), fv: make([]float64, slots),
		at: make([]int64, slots), runOf: make([]int64, slots), prob: make([]bool, slots),
		inWin: make([]bool, slots), pinned: make([]bool, slots), used: make([]bool, slots),
		win: newDlist(slots), heap: make([]hent, 0, slots), hidx: make([]int32, slots),
		hist: newHistory(max(minHistorySize, historyPerSlot*slots)),
	}
	for i := range p.hidx {
		p.hidx[i] = -1
	}
}

func logAdd(a, b float64) float64 {
	if math.IsInf(a, -1) {
		return b
	}
	if a < b {
		a, b = b, a
	}
	return a + math.Log2(1+math.Exp2(b-a))
}

// clock advances the request counter, the layer-run counter (on any change
// of layer) and the cycle counter (when the layer jumps back by more than
// half the range seen: 92 -> 1 is a new cycle, a stray l+1 -> l is not).
func (p *wlfu) clock(k Key) {
	p.t++
	if k.Layer == p.lastLayer {
		return
	}
	p.run++
	if p.sawLayer && k.Layer < p.lastLayer && 2*int64(p.lastLayer-k.Layer) > int64(p.maxL-p.minL) {
		p.cycle++
		p.now = p.lam * float64(p.cycle)
	}
	if !p.sawLayer {
		p.minL, p.maxL, p.sawLayer = k.Layer, k.Layer, true
	}
	p.minL, p.maxL = min(p.minL, k.Layer), max(p.maxL, k.Layer)
	p.lastLayer = k.Layer
}

func (p *wlfu) access(k Key, s int) {
	p.clock(k)
	if s < 0 {
		return
	}
	if p.inWin[s] {
		if p.runOf[s] != p.run {
			// Reused in a later run: rank it by everything before this request.
			p.kv[s] = p.fv[s]
			p.prob[s] = false
		}
		p.fv[s] = logAdd(p.fv[s], p.now)
		if p.win.listed(int32(s)) {
			p.win.remove(int32(s))
			p.win.pushFront(int32(s))
		}
	} else {
		p.fv[s] = logAdd(p.fv[s], p.now)
		p.kv[s] = p.fv[s]
		p.prob[s] = false
	}
	p.runOf[s] = p.run
	p.at[s] = p.t
	if i := p.hidx[s]; i >= 0 {
		p.heap[i] = p.entry(int32(s))
		p.heapFix(int(i))
	}
}

func (p *wlfu) insert(s int, k Key) {
	pre := p.hist.take(k)
	p.key[s], p.kv[s], p.fv[s] = k, pre, logAdd(pre, p.now)
	p.prob[s], p.inWin[s], p.pinned[s], p.used[s] = true, true, true, true
	p.runOf[s], p.at[s] = p.run, p.t
	p.winCount++
}

func (p *wlfu) pin(s int) {
	p.pinned[s] = true
	if p.inWin[s] {
		if p.win.listed(int32(s)) {
			p.win.remove(int32(s))
		}
	} else if i := p.hidx[s]; i >= 0 {
		p.heapRemove(int(i))
	}
}

func (p *wlfu) unpin(s int) {
	p.pinned[s] = false
	if p.inWin[s] {
		p.win.pushFront(int32(s))
	} else {
		p.heapPush(int32(s))
	}
}

func (p *wlfu) remove(s int) {
	p.forget(s)
}

// forget drops slot s (not listed anywhere) and keeps its score as a ghost.
func (p *wlfu) forget(s int) {
	if p.inWin[s] {
		p.winCount--
	}
	p.hist.put(p.key[s], p.fv[s])
	p.used[s], p.inWin[s], p.pinned[s] = false, false, false
}

func (p *wlfu) victim() int {
	// Spill the window's least recent members beyond its target into the
	// main region, where they compete on their (lagging) scores.
	for float64(p.winCount) > p.w && p.win.tail >= 0 && p.runOf[p.win.tail] != p.run {
		s := p.win.tail
		p.win.remove(s)
		p.inWin[s] = false
		p.winCount--
		p.heapPush(s)
	}
	var s int32 = -1
	switch {
	case len(p.heap) > 0:
		s = p.heap[0].s
		p.heapRemove(0)
	case p.win.tail >= 0:
		s = p.win.tail
		p.win.remove(s)
	default:
		return -1
	}
	p.forget(int(s))
	return int(s)
}

// hent is a main-heap entry: a copy of the slot's ranking fields, so that
// comparisons touch one cache line.
type hent struct {
	kv   float64
	at   int64
	s    int32
	prob bool
}

func (p *wlfu) entry(s int32) hent { return hent{kv: p.kv[s], at: p.at[s], s: s, prob: p.prob[s]} }

// less orders the main heap: lowest score first; on a tie a probationary
// newcomer first, then the most recently used (on a cyclic scan the most
// recent is the one needed furthest in the future).
func less(a, b *hent) bool {
	if a.kv != b.kv {
		return a.kv < b.kv
	}
	if a.prob != b.prob {
		return a.prob
	}
	return a.at > b.at
}

func (p *wlfu) heapPush(s int32) {
	p.heap = append(p.heap, p.entry(s))
	p.hidx[s] = int32(len(p.heap) - 1)
	p.up(len(p.heap) - 1)
}

func (p *wlfu) heapRemove(i int) {
	last := len(p.heap) - 1
	s := p.heap[i].s
	if i != last {
		p.swap(i, last)
	}
	p.heap = p.heap[:last]
	p.hidx[s] = -1
	if i != last {
		p.heapFix(i)
	}
}

func (p *wlfu) heapFix(i int) {
	if !p.down(i) {
		p.up(i)
	}
}

func (p *wlfu) swap(i, j int) {
	h := p.heap
	h[i], h[j] = h[j], h[i]
	p.hidx[h[i].s], p.hidx[h[j].s] = int32(i), int32(j)
}

func (p *wlfu) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !less(&p.heap[i], &p.heap[parent]) {
			return
		}
		p.swap(i, parent)
		i = parent
	}
}

func (p *wlfu) down(i0 int) bool {
	i, n := i0, len(p.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && less(&p.heap[r], &p.heap[l]) {
			j = r
		}
		if !less(&p.heap[j], &p.heap[i]) {
			break
		}
		p.swap(i, j)
		i = j
	}
	return i > i0
}
