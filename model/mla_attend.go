package model

// Attention in the latent space, for several heads at once.
//
// Every head of a layer attends over the same cached rows (the latent and
// the rope key of each position), so the heads of a group read each row
// once, from L1, instead of each head streaming the whole cache: for a
// 2,000-token prompt and 64 heads that is 64 times less memory traffic.
// Each head's sums run over the same elements in the same order as one
// head alone would (scoresOne, contextOne), so the results are the same
// bits; the heads' independent sums also keep four floating-point
// dependency chains in flight where one head keeps one.

// headGroup is the number of heads whose sums are interleaved.
const headGroup = 4

// latentScores sets p[g][s] = scale·(qabs[g]·lat[s] + qr[g]·kr[s]) for the
// positions s < npos, for every head g of the group (len(p) heads, any
// number), each dot product summed in float64 in index order: the latent
// part, then the rope part. q[g] holds head g's qabs then its qr, widened
// to float64 once per query row (widening is exact) rather than once per
// position.
func latentScores(p [][]float32, q [][]float64, lat, kr []float32, ckv, r, npos int, scale float32) {
	g := 0
	for ; g+headGroup <= len(p); g += headGroup {
		scoresFour(p[g:g+headGroup], q[g:g+headGroup], lat, kr, ckv, r, npos, scale)
	}
	for ; g < len(p); g++ {
		scoresWide(p[g], q[g], lat, kr, ckv, r, npos, scale)
	}
}

// widen sets dst (len(qabs)+len(qr)) to qabs then qr as float64s.
func widen(dst []float64, qabs, qr []float32) {
	for i, v := range qabs {
		dst[i] = float64(v)
	}
	for i, v := range qr {
		dst[len(qabs)+i] = float64(v)
	}
}

// latentContext sets ctx[g] = Σ_s p[g][s]·lat[s] over s < npos (float32,
// in position order) for every head g of the group.
func latentContext(ctx, p [][]float32, lat []float32, ckv, npos int) {
	g := 0
	for ; g+headGroup <= len(p); g += headGroup {
		contextFour(ctx[g:g+headGroup], p[g:g+headGroup], lat, ckv, npos)
	}
	for ; g < len(p); g++ {
		contextOne(ctx[g], p[g], lat, ckv, npos)
	}
}

// scoresOne is latentScores for one head: the reference the grouped
// kernels equal bit for bit.
func scoresOne(p, qabs, qr, lat, kr []float32, ckv, r, npos int, scale float32) {
	qabs, qr = qabs[:ckv], qr[:r]
	for s := 0; s < npos; s++ {
		l := lat[s*ckv : (s+1)*ckv]
		k := kr[s*r : (s+1)*r]
		var d float64
		for i, v := range qabs {
			d += float64(v) * float64(l[i])
		}
		for i, v := range qr {
			d += float64(v) * float64(k[i])
		}
		p[s] = float32(d) * scale
	}
}

// scoresWide is scoresOne with the query widened beforehand.
func scoresWide(p []float32, q []float64, lat, kr []float32, ckv, r, npos int, scale float32) {
	qa, qb := q[:ckv], q[ckv:ckv+r]
	for s := 0; s < npos; s++ {
		l := lat[s*ckv : (s+1)*ckv]
		l = l[:len(qa)]
		k := kr[s*r : (s+1)*r]
		k = k[:len(qb)]
		var d float64
		for i, v := range l {
			d += qa[i] * float64(v)
		}
		for i, v := range k {
			d += qb[i] * float64(v)
		}
		p[s] = float32(d) * scale
	}
}

// contextOne is latentContext for one head.
func contextOne(ctx, p, lat []float32, ckv, npos int) {
	ctx = ctx[:ckv]
	clear(ctx)
	for s, ps := range p[:npos] {
		l := lat[s*ckv : (s+1)*ckv]
		for i, v := range l {
			ctx[i] += float32(ps * v)
		}
	}
}

// scoresFour is latentScores for four heads. (The products of two float32s
// are exact in float64, so a fused multiply-add, which Go may use, gives
// the same sums as separate operations.)
func scoresFour(p [][]float32, q [][]float64, lat, kr []float32, ckv, r, npos int, scale float32) {
	a0, a1, a2, a3 := q[0][:ckv], q[1][:ckv], q[2][:ckv], q[3][:ckv]
	b0, b1, b2, b3 := q[0][ckv:ckv+r], q[1][ckv:ckv+r], q[2][ckv:ckv+r], q[3][ckv:ckv+r]
	p0, p1, p2, p3 := p[0][:npos], p[1][:npos], p[2][:npos], p[3][:npos]
	for s := range p0 {
		l := lat[s*ckv : (s+1)*ckv]
		l = l[:len(a0)]
		var d0, d1, d2, d3 float64
		for i, v := range l {
			x := float64(v)
			d0 += a0[i] * x
			d1 += a1[i] * x
			d2 += a2[i] * x
			d3 += a3[i] * x
		}
		k := kr[s*r : (s+1)*r]
		k = k[:len(b0)]
		for i, v := range k {
			x := float64(v)
			d0 += b0[i] * x
			d1 += b1[i] * x
			d2 += b2[i] * x
			d3 += b3[i] * x
		}
		p0[s] = float32(d0) * scale
		p1[s] = float32(d1) * scale
		p2[s] = float32(d2) * scale
		p3[s] = float32(d3) * scale
	}
}

// contextFour is latentContext for four heads.
func contextFour(ctx, p [][]float32, lat []float32, ckv, npos int) {
	c0, c1, c2, c3 := ctx[0][:ckv], ctx[1][:ckv], ctx[2][:ckv], ctx[3][:ckv]
	clear(c0)
	clear(c1)
	clear(c2)
	clear(c3)
	p0, p1, p2, p3 := p[0][:npos], p[1][:npos], p[2][:npos], p[3][:npos]
	for s := range p0 {
		q0, q1, q2, q3 := p0[s], p1[s], p2[s], p3[s]
		l := lat[s*ckv : (s+1)*ckv]
		l = l[:len(c0)]
		for i, v := range l {
			c0[i] += float32(q0 * v)
			c1[i] += float32(q1 * v)
			c2[i] += float32(q2 * v)
			c3[i] += float32(q3 * v)
		}
	}
}
