package study

import (
	"math"
	"math/rand/v2"

	"github.com/k3go/k3/cache"
)

// Synthetic describes a decode-like trace: Layers MoE layers each route
// every position to TopK of Experts experts. Each layer has its own Zipf
// popularity (exponent Zipf) over a random permutation of its experts, and
// each position keeps every one of the previous position's experts at that
// layer with probability Carry (temporal correlation) before drawing the
// rest. Prefill positions are requested layer-major (all positions of layer
// 1, then layer 2, ...), then Tokens positions one at a time.
type Synthetic struct {
	Layers, Experts, TopK int
	Prefill, Tokens       int
	Zipf, Carry           float64
	Seed                  uint64
}

// Trace generates the request sequence (layers numbered from 1).
func (s Synthetic) Trace() []cache.Key {
	r := rand.New(rand.NewPCG(s.Seed, 0x6b33))
	cdf := make([]float64, s.Experts)
	var tot float64
	for i := range cdf {
		tot += 1 / math.Pow(float64(i+1), s.Zipf)
		cdf[i] = tot
	}
	perm := make([][]int32, s.Layers)
	for l := range perm {
		perm[l] = make([]int32, s.Experts)
		for i, v := range r.Perm(s.Experts) {
			perm[l][i] = int32(v)
		}
	}
	prev := make([][]int32, s.Layers)
	route := func(l int) []int32 {
		out := make([]int32, 0, s.TopK)
		has := func(e int32) bool {
			for _, x := range out {
				if x == e {
					return true
				}
			}
			return false
		}
		for _, e := range prev[l] {
			if r.Float64() < s.Carry {
				out = append(out, e)
			}
		}
		for len(out) < s.TopK {
			u := r.Float64() * tot
			i := min(s.Experts-1, searchCDF(cdf, u))
			if e := perm[l][i]; !has(e) {
				out = append(out, e)
			}
		}
		prev[l] = out
		return out
	}
	var trace []cache.Key
	if s.Prefill > 0 {
		pos := make([][][]int32, s.Prefill)
		for p := range pos {
			pos[p] = make([][]int32, s.Layers)
			for l := range pos[p] {
				pos[p][l] = route(l)
			}
		}
		for l := 0; l < s.Layers; l++ {
			for p := range pos {
				for _, e := range pos[p][l] {
					trace = append(trace, cache.Key{Layer: int32(l + 1), Expert: e})
				}
			}
		}
	}
	for t := 0; t < s.Tokens; t++ {
		for l := 0; l < s.Layers; l++ {
			for _, e := range route(l) {
				trace = append(trace, cache.Key{Layer: int32(l + 1), Expert: e})
			}
		}
	}
	return trace
}

func searchCDF(cdf []float64, u float64) int {
	lo, hi := 0, len(cdf)-1
	for lo < hi {
		m := (lo + hi) / 2
		if cdf[m] < u {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Passes splits a full-recompute trace into its forward passes: a pass ends
// where the layer drops back (92 -> 1).
func Passes(trace []cache.Key) [][]cache.Key {
	var out [][]cache.Key
	start := 0
	for i := 1; i <= len(trace); i++ {
		if i == len(trace) || trace[i].Layer < trace[i-1].Layer {
			out = append(out, trace[start:i])
			start = i
		}
	}
	return out
}

// Incremental rebuilds a full-recompute trace (each pass re-runs every
// position layer-major, routing deterministic) as incremental decoding: the
// first pass whole (the prefill), then from each later pass only the new
// position, the last topK requests of every layer block.
func Incremental(trace []cache.Key, topK int) []cache.Key {
	ps := Passes(trace)
	if len(ps) == 0 {
		return nil
	}
	out := append([]cache.Key(nil), ps[0]...)
	for _, p := range ps[1:] {
		for i := 1; i <= len(p); i++ {
			if i == len(p) || p[i].Layer != p[i-1].Layer {
				out = append(out, p[i-topK:i]...)
			}
		}
	}
	return out
}
