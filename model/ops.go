package model

import (
	"math"
)

// The element-wise operations of the forward pass, written once in plain
// Go. Every product that feeds an addition is wrapped in float32(...) so no
// compiler fuses it into an FMA: the bits are the same on every platform.
// Long reductions (sums of squares, scores) use one sequential float64
// accumulator, as the reference does.

func sigmoid(x float32) float32 {
	return float32(1 / (1 + math.Exp(float64(-x))))
}

func silu(x float32) float32 { return x * sigmoid(x) }

// rmsNorm writes y = (w ⊙ x) · 1/sqrt(mean(x²) + eps). y may alias x.
func rmsNorm(y, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		y[i] = (w[i] * v) * inv
	}
}

// l2Norm scales v in place to unit L2 norm with a fixed epsilon of 1e-6
// inside the root (a sum of squares, not a mean; no gain).
func l2Norm(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	inv := float32(1 / math.Sqrt(ss+1e-6))
	for i := range v {
		v[i] *= inv
	}
}

// situGLU computes y[i] = (β1·tanh(g/β1)·sigmoid(g)) · (β2·tanh(u/β2)) for
// m gate values g and m up values u; the sigmoid takes the uncapped gate.
// y may alias g.
func situGLU(y, g, u []float32, b1, b2 float32) {
	for i := range y {
		gi, ui := g[i], u[i]
		a := (b1 * float32(math.Tanh(float64(gi/b1)))) * sigmoid(gi)
		y[i] = a * (b2 * float32(math.Tanh(float64(ui/b2))))
	}
}

// shortConv runs the causal depthwise convolution with fused SiLU for one
// time step over C channels. w is [C][Kc]; hist is [C][Kc-1], the previous
// raw inputs oldest first, updated in place. x is the raw input; y may alias
// x.
func shortConv(y, x, w, hist []float32, kc int) {
	h := kc - 1
	for c := range x {
		xc := x[c]
		wc := w[c*kc : (c+1)*kc]
		acc := float32(wc[h] * xc)
		if h > 0 {
			hc := hist[c*h : (c+1)*h]
			for j := 0; j < h; j++ {
				acc += float32(wc[j] * hc[j])
			}
			copy(hc, hc[1:])
			hc[h-1] = xc
		}
		y[c] = silu(acc)
	}
}

// attnRes is the Attention-Residual aggregator: a softmax over the sources,
// each scored by the dot product of its RMS-normalised self with the fold
// vector f, then the weighted sum of the raw sources in source order.
// sources[j] are E-vectors; scratch needs len(sources) floats.
func attnRes(out []float32, sources [][]float32, fold []float32, eps float32, scratch []float32) {
	n := len(out)
	score := scratch[:len(sources)]
	maxScore := float32(math.Inf(-1))
	for j, s := range sources {
		var ss float64
		for _, v := range s {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
		var d float64
		for i, v := range s {
			d += float64(v*inv) * float64(fold[i])
		}
		score[j] = float32(d)
		maxScore = max(maxScore, score[j])
	}
	var z float64
	for j := range score {
		score[j] = float32(math.Exp(float64(score[j] - maxScore)))
		z += float64(score[j])
	}
	invZ := float32(1 / z)
	for j := range score {
		score[j] *= invZ
	}
	for i := range out {
		out[i] = 0
	}
	for j, s := range sources {
		p := score[j]
		for i, v := range s {
			out[i] += float32(p * v)
		}
	}
}

// topK selects k experts by repeated argmax over score+bias (strict >, so
// the lowest index wins ties), records the unbiased scores as weights, then
// renormalises (f64 sum, multiply by the f32 reciprocal) and applies the
// routed scaling factor. choice is scratch of len(scores).
func topK(idx []int32, w []float32, scores, bias, choice []float32, renorm bool, scale float32) {
	for e := range scores {
		choice[e] = scores[e] + bias[e]
	}
	negInf := float32(math.Inf(-1))
	for j := range idx {
		best, bestV := -1, negInf
		for e, v := range choice {
			if v > bestV {
				best, bestV = e, v
			}
		}
		if best < 0 { // every remaining choice is NaN or -inf
			idx[j], w[j] = 0, 0
			continue
		}
		idx[j], w[j] = int32(best), scores[best]
		choice[best] = negInf
	}
	if renorm && len(idx) > 1 {
		var sum float64
		for _, v := range w {
			sum += float64(v)
		}
		inv := float32(1 / (sum + 1e-20))
		for j := range w {
			w[j] *= inv
		}
	}
	for j := range w {
		w[j] *= scale
	}
}

// softmaxInPlace replaces s with softmax(s): max-subtracted exponentials in
// f32, an f64 sum, and a division.
func softmaxInPlace(s []float32) {
	m := float32(math.Inf(-1))
	for _, v := range s {
		m = max(m, v)
	}
	var z float64
	for i, v := range s {
		e := float32(math.Exp(float64(v - m)))
		s[i] = e
		z += float64(e)
	}
	zf := float32(z)
	for i := range s {
		s[i] /= zf
	}
}
