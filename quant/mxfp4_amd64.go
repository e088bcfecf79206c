//go:build !purego

package quant

import (
	"github.com/k3go/k3/internal/platform/cpu"
	"github.com/k3go/k3/internal/platform/kernel/gemm"
)

var archImpls = []*Impl{
	simdImpl(cpu.AVX2, simd{gemm.AVX2,
		[]rowsKernel{mxfp4RowsT1AVX2, mxfp4RowsT2AVX2, mxfp4RowsT3AVX2, mxfp4RowsT4AVX2,
			mxfp4RowsT5AVX2, mxfp4RowsT6AVX2, mxfp4RowsT7AVX2, mxfp4RowsT8AVX2},
		mxfp4TileAVX2, permAVX2[:]}),
	simdImpl(cpu.AVX512, simd{gemm.AVX512,
		[]rowsKernel{mxfp4RowsT1AVX512, mxfp4RowsT2AVX512, mxfp4RowsT3AVX512, mxfp4RowsT4AVX512,
			mxfp4RowsT5AVX512, mxfp4RowsT6AVX512, mxfp4RowsT7AVX512, mxfp4RowsT8AVX512},
		mxfp4TileAVX512, permAVX512[:]}),
}

// rowsKernel is a direct kernel for a fixed number of tokens (see
// internal/asmgen/mxfp4).
type rowsKernel func(dst *float32, dstStride int, packed *byte, pStride int, scales *byte, sStride int, rows, groups int, x *float32) int

// Element order of a group inside the kernels (see internal/asmgen/mxfp4):
// position p of a group's chunks holds element perm[p].
var (
	// AVX2: each 16 elements as a transposed 4×4 block.
	permAVX2 = [16]int{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}
	// AVX-512: even elements, then odd ones.
	permAVX512 = [32]int{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
		1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
)

func simdImpl(name string, s simd) *Impl {
	return &Impl{Name: name, accel: s, Mat: s.standalone}
}

// simd is an MXFP4 implementation on top of the shared gemm kernels. Up to
// directMax tokens, the direct kernels decode each group in registers and
// multiply it with all the tokens at once; beyond, the mat-mat path
// decodes a tile of rows (exact scaled f32, in L2) once and runs the packed
// GEMM over it for all tokens. Both run the same per-(row, token) chain, so
// batched and single-token results are bit-identical. Rows holding a scale
// byte > maxScale (255 = skipped group; 253 and 254, whose dequantised
// weights can overflow f32) are computed by the generic kernel instead, in
// both paths.
type simd struct {
	isa  *gemm.ISA
	rows []rowsKernel // rows[t-1] handles t tokens, t ≤ gemm.DirectT
	tile func(tile *float32, blockStride int, packed *byte, pStride int, scales *byte, sStride int, rows, groups int) int
	perm []int
}

// directMax is the largest token count handled by the direct kernels
// (measured on Zen 3: direct wins up to 8 tokens, the tile GEMM from 12).
const directMax = gemm.DirectT

// maxScale is the largest scale byte the assembly handles.
const maxScale = 252

// mvChunkRows is the rows per parallel chunk of a mat-vec (≈120 KB of
// weights at K3's widths; a multiple of the 4-row block).
const mvChunkRows = 64

func (s simd) grain(n int) int {
	if n > directMax {
		return s.isa.Mc()
	}
	return mvChunkRows
}

func (s simd) releaseX(b *[]float32) { gemm.PutX(b) }

func (s simd) packX(x []float32, cols, n int) ([]float32, *[]float32) {
	chunks := cols / s.isa.Lanes
	b := gemm.GetX(s.isa.XLen(chunks, n))
	if n <= directMax {
		s.isa.PackX(*b, x, cols, chunks, n, chunks, gemm.DirectT, s.perm)
	} else {
		s.isa.PackX(*b, x, cols, chunks, n, s.isa.KcChunks(), s.isa.T, s.perm)
	}
	return *b, b
}

func (s simd) standalone(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x []float32, n int) {
	if cols == 0 {
		for t := 0; t < n; t++ {
			clear(dst[t*dstStride : t*dstStride+rows])
		}
		return
	}
	px, b := s.packX(x, cols, n)
	s.mat(dst, dstStride, packed, scales, rows, cols, x, px, n)
	gemm.PutX(b)
}

func hasSpecial(sc []byte) bool {
	for _, b := range sc {
		if b > maxScale {
			return true
		}
	}
	return false
}

func (s simd) mat(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x, px []float32, n int) {
	if rows == 0 || n == 0 {
		return
	}
	groups := cols / GroupSize
	pStride, sStride := cols/2, groups
	_ = packed[rows*pStride-1]
	_ = scales[rows*sStride-1]
	_ = px[s.isa.XLen(cols/s.isa.Lanes, n)-1]
	if n <= directMax {
		s.direct(dst, dstStride, packed, scales, rows, cols, x, px[:n*cols/s.isa.Lanes*s.isa.Lanes], n)
		return
	}
	a := s.isa
	L, mc, kcs := a.Lanes, a.Mc(), a.KcChunks()
	chunks := cols / L
	sc := gemm.GetScratch()
	for t0 := 0; t0 < n; t0 += gemm.Nc {
		nt := min(gemm.Nc, n-t0)
		for r0 := 0; r0 < rows; r0 += mc {
			mr := min(mc, rows-r0)
			rbs := (mr + a.R - 1) / a.R
			acc := sc.Acc[:rbs*a.R*nt*L]
			clear(acc)
			var special uint64 // rows of this block computed by the generic kernel
			for k0 := 0; k0 < chunks; k0 += kcs {
				kc := min(kcs, chunks-k0)
				tile := sc.Tile[:a.TileLen(mr, kc)]
				g0, ng := k0*L/GroupSize, kc*L/GroupSize
				special |= s.decodeTile(tile, packed[r0*pStride+g0*16:], pStride, scales[r0*sStride+g0:], sStride, mr, ng, kc)
				a.PadTile(tile, mr, kc)
				a.GEMM(acc, tile, a.XBlock(px, chunks, t0, nt, k0, kc), rbs, nt, kc)
			}
			a.Reduce(dst[t0*dstStride+r0:], dstStride, acc, mr, nt)
			for r := 0; special != 0; r++ {
				if special&(1<<r) == 0 {
					continue
				}
				special &^= 1 << r
				rr := r0 + r
				for t := t0; t < t0+nt; t++ {
					dst[t*dstStride+rr] = dotMXFP4(packed[rr*pStride:(rr+1)*pStride], scales[rr*sStride:(rr+1)*sStride], x[t*cols:(t+1)*cols])
				}
			}
		}
	}
	gemm.PutScratch(sc)
}

// direct runs the direct kernel for tb ≤ gemm.DirectT tokens (px their
// packed block); rows with a scale byte > maxScale get the generic kernel.
func (s simd) direct(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x, px []float32, tb int) {
	groups := cols / GroupSize
	pStride, sStride := cols/2, groups
	_ = dst[(tb-1)*dstStride+rows-1]
	k := s.rows[tb-1]
	ds := dstStride * 4
	for done := 0; done < rows; {
		done += k(&dst[done], ds, &packed[done*pStride], pStride, &scales[done*sStride], sStride, rows-done, groups, &px[0])
		if done == rows {
			break
		}
		// A row block holds a special scale: do one row on its own.
		if hasSpecial(scales[done*sStride : (done+1)*sStride]) {
			for t := 0; t < tb; t++ {
				dst[t*dstStride+done] = dotMXFP4(packed[done*pStride:(done+1)*pStride], scales[done*sStride:(done+1)*sStride], x[t*cols:(t+1)*cols])
			}
		} else {
			k(&dst[done], ds, &packed[done*pStride], pStride, &scales[done*sStride], sStride, 1, groups, &px[0])
		}
		done++
	}
}

// decodeTile decodes mr rows × ng groups into the packed tile (kc chunks
// per row) and returns the mask of rows that hold a special scale (their
// tile rows are zeroed).
func (s simd) decodeTile(tile []float32, packed []byte, pStride int, scales []byte, sStride, mr, ng, kc int) (special uint64) {
	a := s.isa
	L, R := a.Lanes, a.R
	bs := R * kc * L * 4
	_ = packed[(mr-1)*pStride+ng*16-1]
	_ = scales[(mr-1)*sStride+ng-1]
	rowOff := func(r int) int { return (r/R)*R*kc*L + (r%R)*L }
	for r := 0; r < mr; {
		todo := mr - r
		if r%R != 0 {
			todo = 1 // the kernel starts runs at the first row of a block
		}
		k := s.tile(&tile[rowOff(r)], bs, &packed[r*pStride], pStride, &scales[r*sStride], sStride, todo, ng)
		r += k
		if k < todo {
			// Stopped at row r: it holds a scale byte > maxScale.
			special |= 1 << r
			for c := 0; c < kc; c++ {
				o := ((r/R)*kc+c)*R*L + (r%R)*L
				clear(tile[o : o+L])
			}
			r++
		}
	}
	return special
}
