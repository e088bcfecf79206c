package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// attendInputs draws a group's queries and a cache of npos rows; the
// values look like real activations (normal, a few large), no subnormals.
func attendInputs(rng *rand.Rand, heads, ckv, r, npos int) (qabs, qr [][]float32, lat, kr []float32) {
	f := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
			if rng.IntN(97) == 0 {
				v[i] *= 40
			}
		}
		return v
	}
	for range heads {
		qabs = append(qabs, f(ckv))
		qr = append(qr, f(r))
	}
	return qabs, qr, f(npos * ckv), f(npos * r)
}

// wide widens each head's queries as the layer does.
func wide(qabs, qr [][]float32) [][]float64 {
	out := make([][]float64, len(qabs))
	for g := range out {
		out[g] = make([]float64, len(qabs[g])+len(qr[g]))
		widen(out[g], qabs[g], qr[g])
	}
	return out
}

// TestLatentAttendMatchesOneHead checks that the grouped kernels give,
// bit for bit, what each head alone gives (scoresOne, contextOne: the
// per-head loops the layer ran before), for groups of 1 to 9 heads, odd
// widths and a single position, with the slices longer than needed (the
// extra entries are sentinels that must stay untouched).
func TestLatentAttendMatchesOneHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ heads, ckv, r, npos int }{
		{1, 512, 64, 33}, {4, 512, 64, 70}, {5, 512, 64, 1}, {9, 17, 3, 29}, {8, 31, 0, 5}, {3, 1, 1, 2}, {7, 64, 8, 130},
	} {
		qabs, qr, lat, kr := attendInputs(rng, c.heads, c.ckv, c.r, c.npos)
		const sentinel = -12345
		mk := func(n int) [][]float32 {
			out := make([][]float32, c.heads)
			for g := range out {
				out[g] = make([]float32, n+3)
				for i := range out[g] {
					out[g][i] = sentinel
				}
			}
			return out
		}
		p, pRef := mk(c.npos), mk(c.npos)
		scale := float32(1 / math.Sqrt(float64(c.ckv+c.r)))
		latentScores(p, wide(qabs, qr), lat, kr, c.ckv, c.r, c.npos, scale)
		for g := range pRef {
			scoresOne(pRef[g], qabs[g], qr[g], lat, kr, c.ckv, c.r, c.npos, scale)
		}
		for g := range p {
			softmaxInPlace(p[g][:c.npos])
			softmaxInPlace(pRef[g][:c.npos])
		}
		ctx, ctxRef := mk(c.ckv), mk(c.ckv)
		latentContext(ctx, p, lat, c.ckv, c.npos)
		for g := range ctxRef {
			contextOne(ctxRef[g], pRef[g], lat, c.ckv, c.npos)
		}
		for g := range p {
			for i := range p[g] {
				if math.Float32bits(p[g][i]) != math.Float32bits(pRef[g][i]) {
					t.Fatalf("%+v head %d: p[%d] = %v, one head alone %v", c, g, i, p[g][i], pRef[g][i])
				}
			}
			for i := range ctx[g] {
				if math.Float32bits(ctx[g][i]) != math.Float32bits(ctxRef[g][i]) {
					t.Fatalf("%+v head %d: ctx[%d] = %v, one head alone %v", c, g, i, ctx[g][i], ctxRef[g][i])
				}
			}
			if p[g][c.npos] != sentinel || ctx[g][c.ckv] != sentinel {
				t.Fatalf("%+v head %d: wrote past the end", c, g)
			}
		}
	}
}

// BenchmarkLatentAttend times one query row's attention for 8 heads (the
// heads of two groups) at K3's widths over a 2,048-position cache:
// grouped against the per-head loops (sub-benchmark "one-head"), in the
// same process.
func BenchmarkLatentAttend(b *testing.B) {
	const heads, ckv, r, npos = 8, 512, 64, 2048
	rng := rand.New(rand.NewPCG(3, 4))
	qabs, qr, lat, kr := attendInputs(rng, heads, ckv, r, npos)
	p, ctx := make([][]float32, heads), make([][]float32, heads)
	for g := range p {
		p[g], ctx[g] = make([]float32, npos), make([]float32, ckv)
	}
	b.Run("grouped", func(b *testing.B) {
		b.SetBytes(int64(npos * (ckv + r) * 4))
		for b.Loop() {
			latentScores(p, wide(qabs, qr), lat, kr, ckv, r, npos, 0.07)
			latentContext(ctx, p, lat, ckv, npos)
		}
	})
	b.Run("one-head", func(b *testing.B) {
		b.SetBytes(int64(npos * (ckv + r) * 4))
		for b.Loop() {
			for g := range p {
				scoresOne(p[g], qabs[g], qr[g], lat, kr, ckv, r, npos, 0.07)
				contextOne(ctx[g], p[g], lat, ckv, npos)
			}
		}
	})
}
