package cache

import (
	"math"
	"slices"
)

// AdaptiveOptions tunes the shipped policy. The zero value gives the defaults
// used in docs/perf-cache.md.
type AdaptiveOptions struct {
	// HalfLife is how many cycles (passes over the layers) it takes a
	// request's weight in an expert's score to halve. Default 8.
	HalfLife float64
	// Windows lists the candidate window sizes as fractions of the cache
	// (0: pure decayed frequency with hysteresis, 1: exactly LRU). The
	// policy simulates each on a sample of keys and uses the one that has
	// hit most lately: hit counts halve every epoch (about one cache's
	// worth of sampled requests) and a switch needs a 5% lead at two epoch
	// ends in a row. It starts with the largest. Default 0, 1/8, 2/8, ...
	// 1. A single entry fixes the window and turns adaptation off.
	Windows []float64
	// SampleSlots is the capacity of each miniature simulation; keys are
	// sampled at rate SampleSlots/slots (all keys when the cache is
	// smaller). Default 1024.
	SampleSlots int
}

// Adaptive is the default replacement policy: a window-plus-frequency cache
// (see the package documentation) whose window size is chosen online by
// miniature simulations, so it behaves like LRU where recency pays and keeps
// a stable, frequency-ranked set where LRU thrashes (a cyclic scan over the
// layers larger than the cache). It starts as LRU and moves away from it only
// on evidence.
//
// Cost per request: O(log slots) for the live cache, plus the same for each
// candidate window on sampled keys (at most SampleSlots/slots of them).
// Memory: about 150 bytes per slot for the live cache and its ghost
// history, plus at most about 1.5 MB for the simulations.
type Adaptive struct {
	opts         AdaptiveOptions
	live         wlfu
	sims         []simCache
	frac         []float64
	score        []float64
	cur          int
	thresh       uint64 // a key is sampled when hash>>48 < thresh
	n            int    // sampled requests in this epoch
	epoch        int
	cand, streak int
}

const (
	defaultSampleSlots = 1024
	switchMargin       = 0.05 // a candidate must beat the current window by 5%...
	confirmEpochs      = 2    // ...at two epoch ends in a row
	scoreKeep          = 0.5  // hit counts halve every epoch
	minEpoch           = 64   // sampled requests
)

var defaultWindows = []float64{0, 1.0 / 8, 2.0 / 8, 3.0 / 8, 4.0 / 8, 5.0 / 8, 6.0 / 8, 7.0 / 8, 1}

// NewAdaptive returns the shipped policy.
func NewAdaptive(opts AdaptiveOptions) *Adaptive {
	return &Adaptive{opts: opts}
}

func (p *Adaptive) Reset(slots int) {
	frac := p.opts.Windows
	if len(frac) == 0 {
		frac = defaultWindows
	}
	p.frac = append(p.frac[:0], frac...)
	for i, f := range p.frac {
		p.frac[i] = min(1, max(0, f))
	}
	slices.Sort(p.frac)
	p.cur = len(p.frac) - 1 // start as the largest window (LRU by default)
	p.cand, p.streak = 0, 0
	p.live.reset(slots, p.opts.HalfLife, p.frac[p.cur]*float64(slots))
	p.sims, p.score, p.n = nil, nil, 0
	if len(p.frac) < 2 {
		return
	}
	ss := p.opts.SampleSlots
	if ss <= 0 {
		ss = defaultSampleSlots
	}
	rate := 1.0
	if slots > ss {
		rate = float64(ss) / float64(slots)
	}
	p.thresh = uint64(math.Ceil(rate * 65536))
	simSlots := max(1, int(math.Round(rate*float64(slots))))
	p.epoch = max(minEpoch, simSlots) // about one cache's worth of requests
	p.score = make([]float64, len(p.frac))
	p.sims = make([]simCache, len(p.frac))
	for i, f := range p.frac {
		p.sims[i].reset(simSlots, p.opts.HalfLife, f*float64(simSlots))
	}
}

func (p *Adaptive) Access(k Key, s int) {
	if len(p.sims) > 0 && k.hash()>>48 < p.thresh {
		for i := range p.sims {
			if p.sims[i].access(k) {
				p.score[i]++
			}
		}
		if p.n++; p.n >= p.epoch {
			p.decide()
		}
	}
	p.live.access(k, s)
}

func (p *Adaptive) decide() {
	p.n = 0
	best := p.cur
	for i := range p.score {
		if p.score[i] > p.score[best]*(1+switchMargin) {
			best = i
		}
	}
	if best != p.cur {
		if best == p.cand {
			p.streak++
		} else {
			p.cand, p.streak = best, 1
		}
		if p.streak >= confirmEpochs {
			p.cur = best
			p.streak = 0
		}
	} else {
		p.streak = 0
	}
	p.live.w = p.frac[p.cur] * float64(p.live.n)
	for i := range p.score {
		p.score[i] *= scoreKeep
	}
}

// Window reports the window size in use, as a fraction of the cache.
func (p *Adaptive) Window() float64 { return p.frac[p.cur] }

func (p *Adaptive) Insert(s int, k Key) { p.live.insert(s, k) }
func (p *Adaptive) Pin(s int)           { p.live.pin(s) }
func (p *Adaptive) Unpin(s int)         { p.live.unpin(s) }
func (p *Adaptive) Remove(s int)        { p.live.remove(s) }
func (p *Adaptive) Victim() int         { return p.live.victim() }

// simCache replays the sampled request stream through a wlfu with a fixed
// window, keeping only keys (no data).
type simCache struct {
	p    wlfu
	ix   keyIndex
	free []int32
}

func (c *simCache) reset(slots int, halfLife, window float64) {
	c.p.reset(slots, halfLife, window)
	c.ix = newKeyIndex(slots)
	c.free = make([]int32, slots)
	for i := range c.free {
		c.free[i] = int32(slots - 1 - i)
	}
}

// access runs one request and reports whether it hit.
func (c *simCache) access(k Key) bool {
	if s, ok := c.ix.get(k); ok {
		c.p.access(k, int(s))
		c.p.pin(int(s))
		c.p.unpin(int(s))
		return true
	}
	c.p.access(k, -1)
	var s int32
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		s = int32(c.p.victim())
		c.ix.del(c.p.key[s])
	}
	c.ix.put(k, s)
	c.p.insert(int(s), k)
	c.p.unpin(int(s))
	return false
}
