package quant

import "github.com/k3go/k3/tensor"

// halfUnits holds 2·E2M1[code]: the element values as small integers
// (-12..12), exact in f32. The scale table absorbs the factor 1/2.
var halfUnits = [16]float32{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// halfScale[s] = 2^(s-127)/2, the factor that turns a half-unit group sum
// into the group's contribution. Index 255 is unused (the group is skipped).
var halfScale = func() (t [256]float32) {
	for s := 0; s < 255; s++ {
		t[s] = tensor.E8M0ToF32(uint8(s)) * 0.5
	}
	return t
}()

// matGeneric is the reference MXFP4 kernel. Per row and token: for each
// group of 32 with scale byte s != 255, the 32 products half(code)·x are
// summed over 8 f32 lanes (element k of the group to lane k mod 8), the lanes
// reduced with ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)), and the group sum
// multiplied by 2^(s-127)/2 and added to one f32 row accumulator, groups in
// order. Products are wrapped in float32(...) so no compiler fuses them.
func matGeneric(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x []float32, n int) {
	pb, sb := cols/2, cols/GroupSize
	for t := 0; t < n; t++ {
		xt := x[t*cols : (t+1)*cols]
		out := dst[t*dstStride:]
		for r := 0; r < rows; r++ {
			out[r] = dotMXFP4(packed[r*pb:(r+1)*pb], scales[r*sb:(r+1)*sb], xt)
		}
	}
}

func dotMXFP4(p, s []byte, x []float32) float32 {
	var acc float32
	for g, sc := range s {
		if sc == SkipScale {
			continue
		}
		pg := p[g*16 : g*16+16 : g*16+16]
		xg := x[g*32 : g*32+32 : g*32+32]
		var l [8]float32
		for k := 0; k < 16; k += 4 {
			// Byte k holds elements 2k (low nibble) and 2k+1 (high nibble);
			// element e goes to lane e mod 8.
			b0, b1, b2, b3 := pg[k], pg[k+1], pg[k+2], pg[k+3]
			e := 2 * k
			l[0] += float32(halfUnits[b0&0xF] * xg[e])
			l[1] += float32(halfUnits[b0>>4] * xg[e+1])
			l[2] += float32(halfUnits[b1&0xF] * xg[e+2])
			l[3] += float32(halfUnits[b1>>4] * xg[e+3])
			l[4] += float32(halfUnits[b2&0xF] * xg[e+4])
			l[5] += float32(halfUnits[b2>>4] * xg[e+5])
			l[6] += float32(halfUnits[b3&0xF] * xg[e+6])
			l[7] += float32(halfUnits[b3>>4] * xg[e+7])
		}
		sum := ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
		acc += float32(sum * halfScale[sc])
	}
	return acc
}
