package tensor

import (
	"encoding/binary"
	"math"
)

// The generic kernels are the reference every assembly kernel is tested
// against. They accumulate in f32 over 8 lanes (element c goes to lane
// c mod 8), reduce the lanes with the tree ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7))
// and add a tail (cols mod 8) one by one. Every product is wrapped in
// float32(...) so that no Go compiler fuses it into an FMA: the bits are the
// same on every architecture and GOAMD64 level.

func matBF16Generic(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
	for t := 0; t < n; t++ {
		xt := x[t*cols : (t+1)*cols]
		out := dst[t*dstStride:]
		for r := 0; r < rows; r++ {
			out[r] = dotBF16(w[r*cols*2:(r+1)*cols*2], xt)
		}
	}
}

func matF32Generic(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
	for t := 0; t < n; t++ {
		xt := x[t*cols : (t+1)*cols]
		out := dst[t*dstStride:]
		for r := 0; r < rows; r++ {
			out[r] = dotF32(w[r*cols*4:(r+1)*cols*4], xt)
		}
	}
}

func bf16At(w []byte, i int) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[2*i:])) << 16)
}

func f32At(w []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
}

func dotBF16(w []byte, x []float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	n := len(x)
	c := 0
	for ; c+8 <= n; c += 8 {
		xs := x[c : c+8 : c+8]
		ws := w[2*c : 2*c+16 : 2*c+16]
		l0 += float32(bf16At(ws, 0) * xs[0])
		l1 += float32(bf16At(ws, 1) * xs[1])
		l2 += float32(bf16At(ws, 2) * xs[2])
		l3 += float32(bf16At(ws, 3) * xs[3])
		l4 += float32(bf16At(ws, 4) * xs[4])
		l5 += float32(bf16At(ws, 5) * xs[5])
		l6 += float32(bf16At(ws, 6) * xs[6])
		l7 += float32(bf16At(ws, 7) * xs[7])
	}
	s := ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7))
	for ; c < n; c++ {
		s += float32(bf16At(w, c) * x[c])
	}
	return s
}

func dotF32(w []byte, x []float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	n := len(x)
	c := 0
	for ; c+8 <= n; c += 8 {
		xs := x[c : c+8 : c+8]
		ws := w[4*c : 4*c+32 : 4*c+32]
		l0 += float32(f32At(ws, 0) * xs[0])
		l1 += float32(f32At(ws, 1) * xs[1])
		l2 += float32(f32At(ws, 2) * xs[2])
		l3 += float32(f32At(ws, 3) * xs[3])
		l4 += float32(f32At(ws, 4) * xs[4])
		l5 += float32(f32At(ws, 5) * xs[5])
		l6 += float32(f32At(ws, 6) * xs[6])
		l7 += float32(f32At(ws, 7) * xs[7])
	}
	s := ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7))
	for ; c < n; c++ {
		s += float32(f32At(w, c) * x[c])
	}
	return s
}
