//go:build !purego

package gemm

import (
	"sync"
	"unsafe"
)

// ISA is one instruction set's dense kernels.
type ISA struct {
	Name  string
	Lanes int // f32 lanes per vector
	R, T  int // GEMM register block: rows × tokens

	dotF32, dotBF16   func(dst *float32, w *byte, stride, rows, chunks int, x *float32)
	packF32, packBF16 func(dst *float32, blockStride int, w *byte, stride, rows, chunks int)
	gemm              func(acc, tile, x *float32, rowBlocks, tokens, chunks int)
	fma               func(iters int)
	read              func(p *byte, n int)
	f64F32, f64BF16   func(dst *float64, w *byte, stride, rows, blocks int, x *float64)
	dot               func(a, b *float32, blocks int) float32
	axpy              func(y *float32, a float32, x *float32, blocks int)
	// dotT[t] are the direct kernels for t tokens (2 ≤ t ≤ DirectT).
	dotTF32, dotTBF16 [DirectT + 1]func(dst *float32, dstStride int, w *byte, stride, rows, chunks int, x *float32)
}

// AVX2 holds the AVX2+FMA kernels.
var AVX2 = &ISA{Name: "avx2", Lanes: 8, R: 3, T: 4,
	dotF32: dotRowsF32AVX2, dotBF16: dotRowsBF16AVX2,
	packF32: packF32AVX2, packBF16: packBF16AVX2,
	gemm: gemmAVX2, fma: fmaPeakAVX2, read: readBWAVX2,
	f64F32: dotRowsF64F32AVX2, f64BF16: dotRowsF64BF16AVX2, dot: dotF32AVX2, axpy: axpyF32AVX2,
	dotTF32: [...]func(*float32, int, *byte, int, int, int, *float32){2: dotRowsT2F32AVX2, 3: dotRowsT3F32AVX2,
		4: dotRowsT4F32AVX2, 5: dotRowsT5F32AVX2, 6: dotRowsT6F32AVX2, 7: dotRowsT7F32AVX2, 8: dotRowsT8F32AVX2},
	dotTBF16: [...]func(*float32, int, *byte, int, int, int, *float32){2: dotRowsT2BF16AVX2, 3: dotRowsT3BF16AVX2,
		4: dotRowsT4BF16AVX2, 5: dotRowsT5BF16AVX2, 6: dotRowsT6BF16AVX2, 7: dotRowsT7BF16AVX2, 8: dotRowsT8BF16AVX2},
}

// AVX512 holds the AVX-512 kernels.
var AVX512 = &ISA{Name: "avx512", Lanes: 16, R: 4, T: 6,
	dotF32: dotRowsF32AVX512, dotBF16: dotRowsBF16AVX512,
	packF32: packF32AVX512, packBF16: packBF16AVX512,
	gemm: gemmAVX512, fma: fmaPeakAVX512, read: readBWAVX512,
	f64F32: dotRowsF64F32AVX512, f64BF16: dotRowsF64BF16AVX512, dot: dotF32AVX512, axpy: axpyF32AVX512,
	dotTF32: [...]func(*float32, int, *byte, int, int, int, *float32){2: dotRowsT2F32AVX512, 3: dotRowsT3F32AVX512,
		4: dotRowsT4F32AVX512, 5: dotRowsT5F32AVX512, 6: dotRowsT6F32AVX512, 7: dotRowsT7F32AVX512, 8: dotRowsT8F32AVX512},
	dotTBF16: [...]func(*float32, int, *byte, int, int, int, *float32){2: dotRowsT2BF16AVX512, 3: dotRowsT3BF16AVX512,
		4: dotRowsT4BF16AVX512, 5: dotRowsT5BF16AVX512, 6: dotRowsT6BF16AVX512, 7: dotRowsT7BF16AVX512, 8: dotRowsT8BF16AVX512},
}

// Blocking of the GEMM path. One assembly call multiplies at most
// Mc rows × KcCols columns × Nc tokens (≈3–4 MFLOP, tens of microseconds),
// so calls stay short (assembly cannot be preempted), and its operands fit
// in L2: the weight tile (Mc·KcCols f32), the accumulators (Mc·Nc·L f32)
// and one column block of x (Nc·KcCols f32).
const (
	KcCols = 512 // columns per block (a multiple of 32: MXFP4 groups)
	Nc     = 64  // tokens per block
	// RowsMV is the row block of the mat-vec kernels; row grains should be
	// multiples of it.
	RowsMV = 8
	// DirectT is the largest batch of the direct kernels, which read each
	// weight chunk once for all tokens without a tile (better for small
	// batches: whole rows stream from memory). Larger batches use the GEMM.
	DirectT = 8
)

// Mc returns the rows per GEMM tile: a multiple of the register block.
func (a *ISA) Mc() int { return 16 * a.R }

// KcChunks returns the chunks (vectors) per column block.
func (a *ISA) KcChunks() int { return KcCols / a.Lanes }

func f32p(s []float32) *float32 { return unsafe.SliceData(s) }

// MatVec computes dst[r] = tree(Σ_chunks fma(w[r], x)) for r < rows, over
// chunks·Lanes columns of rows stride bytes apart (w in BF16 if bf16, else
// F32).
func (a *ISA) MatVec(dst []float32, w []byte, stride, rows, chunks int, x []float32, bf16 bool) {
	if rows == 0 {
		return
	}
	_ = dst[rows-1]
	_ = x[chunks*a.Lanes-1]
	esz := 4
	if bf16 {
		esz = 2
	}
	_ = w[(rows-1)*stride+chunks*a.Lanes*esz-1]
	if bf16 {
		a.dotBF16(f32p(dst), unsafe.SliceData(w), stride, rows, chunks, f32p(x))
	} else {
		a.dotF32(f32p(dst), unsafe.SliceData(w), stride, rows, chunks, f32p(x))
	}
}

// MatVecT runs the direct kernel for 2 ≤ n ≤ DirectT tokens, px holding
// them packed by PackX with tb = DirectT and kcs = chunks.
func (a *ISA) MatVecT(dst []float32, dstStride int, w []byte, stride, rows, chunks int, px []float32, n int, bf16 bool) {
	if rows == 0 {
		return
	}
	_ = dst[(n-1)*dstStride+rows-1]
	_ = px[n*chunks*a.Lanes-1]
	esz := 4
	k := a.dotTF32[n]
	if bf16 {
		esz, k = 2, a.dotTBF16[n]
	}
	_ = w[(rows-1)*stride+chunks*a.Lanes*esz-1]
	k(f32p(dst), 4*dstStride, unsafe.SliceData(w), stride, rows, chunks, f32p(px))
}

// TileLen returns the f32 length of a packed tile of rows × chunks.
func (a *ISA) TileLen(rows, chunks int) int {
	return (rows + a.R - 1) / a.R * a.R * chunks * a.Lanes
}

// PadTile zeroes the padding rows of the last block of a packed tile of rows
// × chunks, so that the GEMM never reads stale values there.
func (a *ISA) PadTile(tile []float32, rows, chunks int) {
	if rows%a.R == 0 {
		return
	}
	L := a.Lanes
	blk := tile[(rows/a.R)*a.R*chunks*L:]
	for k := 0; k < chunks; k++ {
		for i := rows % a.R; i < a.R; i++ {
			clear(blk[(k*a.R+i)*L : (k*a.R+i+1)*L])
		}
	}
}

// PackW widens rows × chunks·Lanes weights (rows stride bytes apart) into
// the packed tile layout [row block][chunk][R][L].
func (a *ISA) PackW(tile []float32, w []byte, stride, rows, chunks int, bf16 bool) {
	if rows == 0 || chunks == 0 {
		return
	}
	_ = tile[a.TileLen(rows, chunks)-1]
	esz := 4
	if bf16 {
		esz = 2
	}
	_ = w[(rows-1)*stride+chunks*a.Lanes*esz-1]
	bs := a.R * chunks * a.Lanes * 4
	if bf16 {
		a.packBF16(f32p(tile), bs, unsafe.SliceData(w), stride, rows, chunks)
	} else {
		a.packF32(f32p(tile), bs, unsafe.SliceData(w), stride, rows, chunks)
	}
	a.PadTile(tile, rows, chunks)
}

// GEMM accumulates acc += tile·x for a packed tile of rowBlocks·R rows and
// chunks chunks, and one column block of packed x with tokens tokens.
func (a *ISA) GEMM(acc, tile, x []float32, rowBlocks, tokens, chunks int) {
	if rowBlocks == 0 || tokens == 0 || chunks == 0 {
		return
	}
	L := a.Lanes
	_ = acc[rowBlocks*tokens*a.R*L-1]
	_ = tile[rowBlocks*a.R*chunks*L-1]
	_ = x[tokens*chunks*L-1]
	a.gemm(f32p(acc), f32p(tile), f32p(x), rowBlocks, tokens, chunks)
}

// XLen returns the f32 length of n packed tokens of chunks chunks.
func (a *ISA) XLen(chunks, n int) int { return n * chunks * a.Lanes }

// XBlock returns the packed x block of tokens [t0, t0+nt) (t0 a multiple of
// Nc, nt = min(Nc, n−t0)) and column chunks [k0, k0+kc) (k0 a multiple of
// KcChunks).
func (a *ISA) XBlock(px []float32, chunks, t0, nt, k0, kc int) []float32 {
	L := a.Lanes
	off := t0*chunks*L + nt*k0*L
	return px[off : off+nt*kc*L]
}

// PackX lays out n tokens of x (token t at x[t·cols:]) for the GEMM: token
// blocks of Nc, column blocks of kcs chunks (KcChunks for the GEMM; all
// chunks for the direct multi-token kernels), register blocks of T tokens,
// chunk-major inside a register block. perm, if not nil, reorders the
// elements of every group of len(perm) columns (the kernel's element order:
// position p takes element perm[p]). With n = 1 the result is x in kernel
// element order.
//
// tb is the register block of tokens: T for the GEMM, DirectT for the
// direct kernels (n ≤ DirectT then gives one block: [chunk][n][L]).
func (a *ISA) PackX(px, x []float32, cols, chunks, n, kcs, tb int, perm []int) {
	L := a.Lanes
	k := chunks * L
	if perm != nil {
		// Permute in place in px first when n == 1 (the layout is then
		// final); otherwise into a pooled buffer that the chunk copy reads.
		if n == 1 {
			permuteRow(px[:k], x[:k], perm)
			return
		}
		b := GetX(n * k)
		for t := 0; t < n; t++ {
			permuteRow((*b)[t*k:(t+1)*k], x[t*cols:t*cols+k], perm)
		}
		a.interleave(px, *b, k, chunks, n, kcs, tb)
		PutX(b)
		return
	}
	a.interleave(px, x, cols, chunks, n, kcs, tb)
}

// interleave copies chunks of n rows of x (row stride cols) into the packed
// layout.
func (a *ISA) interleave(px, x []float32, cols, chunks, n, kcs, T int) {
	L := a.Lanes
	o := 0
	for t0 := 0; t0 < n; t0 += Nc {
		nt := min(Nc, n-t0)
		for k0 := 0; k0 < chunks; k0 += kcs {
			kc := min(kcs, chunks-k0)
			for b0 := 0; b0 < nt; b0 += T {
				tb := min(T, nt-b0)
				for k := k0; k < k0+kc; k++ {
					for j := 0; j < tb; j++ {
						r := (t0 + b0 + j) * cols
						copy(px[o:o+L], x[r+k*L:r+(k+1)*L])
						o += L
					}
				}
			}
		}
	}
}

// permuteRow writes dst[g·G+p] = src[g·G+perm[p]] for every group of
// G = len(perm) (16 or 32) elements.
func permuteRow(dst, src []float32, perm []int) {
	switch len(perm) {
	case 16:
		p := (*[16]int)(perm)
		for g := 0; g+16 <= len(src); g += 16 {
			s := (*[16]float32)(src[g : g+16])
			d := (*[16]float32)(dst[g : g+16])
			for i, j := range p {
				d[i] = s[j&15]
			}
		}
	case 32:
		p := (*[32]int)(perm)
		for g := 0; g+32 <= len(src); g += 32 {
			s := (*[32]float32)(src[g : g+32])
			d := (*[32]float32)(dst[g : g+32])
			for i, j := range p {
				d[i] = s[j&31]
			}
		}
	default:
		panic("gemm: permutation must have 16 or 32 elements")
	}
}

// Reduce writes dst[t·dstStride + r] = tree(acc(r, t)) for r < rows,
// t < tokens, acc in the layout [row block][token][R][L].
func (a *ISA) Reduce(dst []float32, dstStride int, acc []float32, rows, tokens int) {
	L, R := a.Lanes, a.R
	for r := 0; r < rows; r++ {
		rb, i := r/R, r%R
		for t := 0; t < tokens; t++ {
			off := ((rb*tokens+t)*R + i) * L
			if L == 16 {
				dst[t*dstStride+r] = Reduce16((*[16]float32)(acc[off : off+16]))
			} else {
				dst[t*dstStride+r] = Reduce8((*[8]float32)(acc[off : off+8]))
			}
		}
	}
}

// Reduce8 is the lane tree ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)).
func Reduce8(l *[8]float32) float32 {
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

// Reduce16 folds l_i + l_{i+8} and applies Reduce8.
func Reduce16(l *[16]float32) float32 {
	var m [8]float32
	for i := range m {
		m[i] = l[i] + l[i+8]
	}
	return Reduce8(&m)
}

// Scratch is one goroutine's working memory for the GEMM path.
type Scratch struct {
	Tile []float32
	Acc  []float32
}

var scratch = sync.Pool{New: func() any {
	return &Scratch{
		Tile: make([]float32, 16*4*KcCols), // Mc·KcCols for the largest Mc
		Acc:  make([]float32, 16*4*Nc*16),  // Mc·Nc·L
	}
}}

// GetScratch returns pooled scratch; PutScratch returns it.
func GetScratch() *Scratch  { return scratch.Get().(*Scratch) }
func PutScratch(s *Scratch) { scratch.Put(s) }

var xbufs sync.Pool

// GetX returns a pooled buffer of at least n floats; PutX returns it.
// Capacities are rounded up to a power of two, so that with calls of mixed
// sizes the pool settles on buffers large enough for all of them (a buffer
// found too small is dropped).
func GetX(n int) *[]float32 {
	if p, ok := xbufs.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	c := 1024
	for c < n {
		c *= 2
	}
	b := make([]float32, n, c)
	return &b
}

// PutX returns a buffer obtained from GetX.
func PutX(p *[]float32) { xbufs.Put(p) }

// Dense computes rows × n tokens of an F32 or BF16 matrix with the tensor
// MatKernel contract: dst[t·dstStride + r] = Σ_c w[r][c]·x[t·cols + c].
// px is x packed by PackX (nil when n = 1). The first chunks·Lanes columns
// go through the SIMD chain; the remaining cols mod Lanes columns are added
// afterwards one by one, as dst += float32(w·x), in column order.
func (a *ISA) Dense(dst []float32, dstStride int, w []byte, rows, cols int, x, px []float32, n int, bf16 bool) {
	if rows == 0 || n == 0 {
		return
	}
	esz := 4
	if bf16 {
		esz = 2
	}
	stride := cols * esz
	chunks := cols / a.Lanes
	switch {
	case chunks == 0:
		for t := 0; t < n; t++ {
			clear(dst[t*dstStride : t*dstStride+rows])
		}
	case n == 1:
		a.MatVec(dst, w, stride, rows, chunks, x, bf16)
	case n <= DirectT:
		a.MatVecT(dst, dstStride, w, stride, rows, chunks, px, n, bf16)
	default:
		s := GetScratch()
		L, mc, kcs := a.Lanes, a.Mc(), a.KcChunks()
		for t0 := 0; t0 < n; t0 += Nc {
			nt := min(Nc, n-t0)
			for r0 := 0; r0 < rows; r0 += mc {
				mr := min(mc, rows-r0)
				rbs := (mr + a.R - 1) / a.R
				acc := s.Acc[:rbs*a.R*nt*L]
				clear(acc)
				for k0 := 0; k0 < chunks; k0 += kcs {
					kc := min(kcs, chunks-k0)
					tile := s.Tile[:a.TileLen(mr, kc)]
					a.PackW(tile, w[r0*stride+k0*L*esz:], stride, mr, kc, bf16)
					a.GEMM(acc, tile, a.XBlock(px, chunks, t0, nt, k0, kc), rbs, nt, kc)
				}
				a.Reduce(dst[t0*dstStride+r0:], dstStride, acc, mr, nt)
			}
		}
		PutScratch(s)
	}
	if k := chunks * a.Lanes; k < cols {
		addTail(dst, dstStride, w, stride, x, rows, cols, n, k, bf16)
	}
}

// FMAPeak runs iters × 12 independent vector FMAs (2·Lanes flops each).
func (a *ISA) FMAPeak(iters int) { a.fma(iters) }

// Read streams p (its length rounded down to 8 vectors) through vector
// loads.
func (a *ISA) Read(p []byte) {
	n := len(p) / (8 * 4 * a.Lanes) * (8 * 4 * a.Lanes)
	if n > 0 {
		a.read(unsafe.SliceData(p), n)
	}
}

// MatVecF64 writes to dst[r] the f64 lane-tree sum of float64(w)·x64 over
// blocks·16 columns of each of rows rows (stride bytes apart).
func (a *ISA) MatVecF64(dst []float64, w []byte, bf16 bool, stride, rows, blocks int, x64 []float64) {
	if !checkMatVecF64(dst, w, bf16, stride, rows, blocks, x64) {
		return
	}
	if bf16 {
		a.f64BF16(unsafe.SliceData(dst), unsafe.SliceData(w), stride, rows, blocks, unsafe.SliceData(x64))
	} else {
		a.f64F32(unsafe.SliceData(dst), unsafe.SliceData(w), stride, rows, blocks, unsafe.SliceData(x64))
	}
}

// Dot returns the 32-lane dot product of a and b (len a multiple of 32).
func (a *ISA) Dot(x, y []float32) float32 {
	n := len(x) / 32
	if n == 0 {
		return 0
	}
	_ = y[32*n-1]
	return a.dot(f32p(x), f32p(y), n)
}

// Axpy computes y += s·x over len(y) (a multiple of 32) elements.
func (a *ISA) Axpy(y []float32, s float32, x []float32) {
	n := len(y) / 32
	if n == 0 {
		return
	}
	_ = x[32*n-1]
	a.axpy(f32p(y), s, f32p(x), n)
}
