package study

import (
	"math"

	"github.com/k3go/k3/cache"
)

// LayerLFU is the reference document's "per-layer LFU": every layer seen so
// far gets an equal share of the slots; a miss evicts from the layer furthest
// over its share its least frequently requested expert (least recent among
// equals). Request counts are kept for every key ever seen, resident or not.
// Victim costs O(layers + slots per layer): fine for the study, not shipped.
type LayerLFU struct {
	n      int
	count  map[cache.Key]int64
	t      int64
	key    []cache.Key
	at     []int64
	pinned []bool
	used   []bool
	layers map[int32][]int // resident slots per layer
}

func NewLayerLFU() *LayerLFU { return &LayerLFU{} }

func (p *LayerLFU) Reset(slots int) {
	*p = LayerLFU{n: slots, count: map[cache.Key]int64{}, key: make([]cache.Key, slots),
		at: make([]int64, slots), pinned: make([]bool, slots), used: make([]bool, slots),
		layers: map[int32][]int{}}
}

func (p *LayerLFU) Access(k cache.Key, slot int) {
	p.t++
	p.count[k]++
	if _, ok := p.layers[k.Layer]; !ok {
		p.layers[k.Layer] = nil
	}
	if slot >= 0 {
		p.at[slot] = p.t
	}
}

func (p *LayerLFU) Insert(slot int, k cache.Key) {
	p.key[slot], p.at[slot], p.used[slot], p.pinned[slot] = k, p.t, true, true
	p.layers[k.Layer] = append(p.layers[k.Layer], slot)
}

func (p *LayerLFU) Pin(slot int)   { p.pinned[slot] = true }
func (p *LayerLFU) Unpin(slot int) { p.pinned[slot] = false }
func (p *LayerLFU) Remove(slot int) {
	p.drop(slot)
}

func (p *LayerLFU) drop(slot int) {
	l := p.key[slot].Layer
	s := p.layers[l]
	for i, x := range s {
		if x == slot {
			s[i] = s[len(s)-1]
			p.layers[l] = s[:len(s)-1]
			break
		}
	}
	p.used[slot], p.pinned[slot] = false, false
}

func (p *LayerLFU) Victim() int {
	quota := float64(p.n) / float64(max(1, len(p.layers)))
	best, bestOver := -1, math.Inf(-1)
	for l, s := range p.layers {
		over := float64(len(s)) - quota
		if over > bestOver || (over == bestOver && best >= 0 && l < p.key[best].Layer) {
			if v := p.lfu(s); v >= 0 {
				best, bestOver = v, over
			}
		}
	}
	if best >= 0 {
		p.drop(best)
	}
	return best
}

func (p *LayerLFU) lfu(s []int) int {
	v := -1
	for _, x := range s {
		if p.pinned[x] {
			continue
		}
		if v < 0 || p.count[p.key[x]] < p.count[p.key[v]] ||
			(p.count[p.key[x]] == p.count[p.key[v]] && p.at[x] < p.at[v]) {
			v = x
		}
	}
	return v
}
