//go:build !purego

package gemm

//go:generate sh -c "cd ../../../asmgen && go run ./neon -out ../platform/kernel/gemm/neon_arm64.s -stubs ../platform/kernel/gemm/neon_stub_arm64.go -pkg gemm"

// NEONLanes is the f32 lanes of the NEON chain: two 4-lane vectors, element
// c of a row to lane c mod 8, as in the AVX2 kernels.
const NEONLanes = 8

// NEONMaxT is the largest token count of one NEON dense kernel call.
const NEONMaxT = 4

// neonBlockBytes is the weight bytes of the row block that every token
// block passes over before the next row block (L1-sized, so a batch reads
// each weight from memory once).
const neonBlockBytes = 32 << 10

var neonDense = [2][NEONMaxT + 1]func(dst *float32, dstStride int, w *byte, stride, rows, chunks int, x *float32, xStride int){
	{1: denseT1F32NEON, 2: denseT2F32NEON, 3: denseT3F32NEON, 4: denseT4F32NEON},
	{1: denseT1BF16NEON, 2: denseT2BF16NEON, 3: denseT3BF16NEON, 4: denseT4BF16NEON},
}

// NEONDense computes rows × n tokens of an F32 or BF16 matrix with the
// tensor MatKernel contract: dst[t·dstStride + r] = Σ_c w[r][c]·x[t·cols + c].
// The first cols/8·8 columns go through the NEON chain (the AVX2 chain: the
// same bits); the remaining cols mod 8 columns are added afterwards one by
// one, as dst += float32(w·x), in column order. Every (row, token) gets the
// same arithmetic whatever n, so a batched token equals a one-token call.
func NEONDense(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int, bf16 bool) {
	if rows == 0 || n == 0 {
		return
	}
	esz, kind := 4, 0
	if bf16 {
		esz, kind = 2, 1
	}
	stride := cols * esz
	chunks := cols / NEONLanes
	_ = dst[(n-1)*dstStride+rows-1]
	if chunks == 0 {
		for t := 0; t < n; t++ {
			clear(dst[t*dstStride : t*dstStride+rows])
		}
	} else {
		_ = x[n*cols-1]
		_ = w[rows*stride-1]
		rb := max(4, neonBlockBytes/stride/4*4)
		for r0 := 0; r0 < rows; r0 += rb {
			nr := min(rb, rows-r0)
			for t0 := 0; t0 < n; t0 += NEONMaxT {
				tb := min(NEONMaxT, n-t0)
				neonDense[kind][tb](&dst[t0*dstStride+r0], 4*dstStride, &w[r0*stride], stride, nr, chunks, &x[t0*cols], 4*cols)
			}
		}
	}
	if k := chunks * NEONLanes; k < cols {
		addTail(dst, dstStride, w, stride, x, rows, cols, n, k, bf16)
	}
}

// NEONDot returns the 32-lane dot product of x and y (the order of
// tensor.Dot) over len(x)/32·32 elements; 0 if that is none.
func NEONDot(x, y []float32) float32 {
	n := len(x) / 32
	if n == 0 {
		return 0
	}
	_ = y[32*n-1]
	return dotF32NEON(&x[0], &y[0], n)
}

// NEONAxpy computes y += s·x (product rounded, then added) over
// len(y)/32·32 elements.
func NEONAxpy(y []float32, s float32, x []float32) {
	n := len(y) / 32
	if n == 0 {
		return
	}
	_ = x[32*n-1]
	axpyF32NEON(&y[0], s, &x[0], n)
}

// NEONMatVecF64 writes to dst[r] the f64 lane-tree sum of float64(w)·x64
// over blocks·16 columns of each of rows rows (stride bytes apart), in the
// order of tensor.MatVecF64Acc.
func NEONMatVecF64(dst []float64, w []byte, bf16 bool, stride, rows, blocks int, x64 []float64) {
	if !checkMatVecF64(dst, w, bf16, stride, rows, blocks, x64) {
		return
	}
	if bf16 {
		dotRowsF64BF16NEON(&dst[0], &w[0], stride, rows, blocks, &x64[0])
	} else {
		dotRowsF64F32NEON(&dst[0], &w[0], stride, rows, blocks, &x64[0])
	}
}

// NEONFMAPeak runs iters × 16 independent 4-lane FMAs (8 flops each) and
// returns the flops executed.
func NEONFMAPeak(iters int) float64 {
	fmaPeakNEON(iters)
	return float64(iters) * 16 * 2 * 4
}

// NEONRead streams p (its length rounded down to 256 bytes) through vector
// loads.
func NEONRead(p []byte) {
	if n := len(p) / 256 * 256; n > 0 {
		readBWNEON(&p[0], n)
	}
}
