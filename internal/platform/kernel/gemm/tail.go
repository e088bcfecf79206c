//go:build (amd64 || arm64) && !purego

package gemm

import (
	"encoding/binary"
	"math"
)

// addTail adds columns k..cols-1 of every row of w (F32, or BF16 when bf16)
// times each token's x to dst, one element at a time in column order: the
// columns past the kernels' last whole chunk of lanes, summed after them
// exactly as the generic code sums its tail.
func addTail(dst []float32, dstStride int, w []byte, stride int, x []float32, rows, cols, n, k int, bf16 bool) {
	for t := 0; t < n; t++ {
		xt := x[t*cols : (t+1)*cols]
		for r := 0; r < rows; r++ {
			wr := w[r*stride : (r+1)*stride]
			s := dst[t*dstStride+r]
			for c := k; c < cols; c++ {
				s += float32(elem(wr, c, bf16) * xt[c])
			}
			dst[t*dstStride+r] = s
		}
	}
}

// elem is element c of a row of F32 or BF16 weights, widened exactly.
func elem(w []byte, c int, bf16 bool) float32 {
	if bf16 {
		return math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[2*c:])) << 16)
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(w[4*c:]))
}

// checkMatVecF64 panics, before any assembly runs, if dst, w or x64 are
// too short for rows rows of blocks·16 columns (stride bytes apart); it
// reports whether there is any work.
func checkMatVecF64(dst []float64, w []byte, bf16 bool, stride, rows, blocks int, x64 []float64) bool {
	if rows == 0 || blocks == 0 {
		return false
	}
	esz := 4
	if bf16 {
		esz = 2
	}
	_ = dst[rows-1]
	_ = x64[16*blocks-1]
	_ = w[(rows-1)*stride+16*blocks*esz-1]
	return true
}
