//go:build !purego

package quant

import "github.com/k3go/k3/internal/platform/cpu"

//go:generate sh -c "cd ../internal/asmgen && go run ./neon -out ../../quant/mxfp4_arm64.s -stubs ../../quant/mxfp4_stub_arm64.go -pkg quant"

// archImpls holds the NEON kernel (see internal/asmgen/neon): each group of
// 32 codes is decoded by TBL into the exact f32 weights E2M1·2^(s−127) and
// fed to the dense 8-lane FMA chain, groups in order, lanes reduced with the
// tree ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) at the end of the row.
var archImpls = []*Impl{{Name: cpu.NEON, Mat: matNEON}}

// neonMaxT is the largest token count of one NEON kernel call.
const neonMaxT = 8

// neonBlockBytes is the packed bytes of the row block that every token
// block passes over before the next row block (L1-sized).
const neonBlockBytes = 32 << 10

type neonKernel func(dst *float32, dstStride int, packed *byte, pStride int, scales *byte, sStride int, rows, groups int, x *float32, xStride int) int

var neonKernels = [neonMaxT + 1]neonKernel{1: mxfp4T1NEON, 2: mxfp4T2NEON, 3: mxfp4T3NEON, 4: mxfp4T4NEON,
	5: mxfp4T5NEON, 6: mxfp4T6NEON, 7: mxfp4T7NEON, 8: mxfp4T8NEON}

// matNEON is the NEON MatKernel. Rows holding a scale byte > 252 (255 =
// skipped group; 253 and 254, whose dequantised weights can overflow f32)
// are computed by the generic kernel, as on amd64.
func matNEON(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x []float32, n int) {
	if rows == 0 || n == 0 {
		return
	}
	if cols == 0 {
		for t := 0; t < n; t++ {
			clear(dst[t*dstStride : t*dstStride+rows])
		}
		return
	}
	groups := cols / GroupSize
	pStride, sStride := cols/2, groups
	_ = dst[(n-1)*dstStride+rows-1]
	_ = packed[rows*pStride-1]
	_ = scales[rows*sStride-1]
	_ = x[n*cols-1]
	rb := max(4, neonBlockBytes/pStride/4*4)
	for r0 := 0; r0 < rows; r0 += rb {
		nr := min(rb, rows-r0)
		for t0 := 0; t0 < n; t0 += neonMaxT {
			tb := min(neonMaxT, n-t0)
			neonRows(dst[t0*dstStride+r0:], dstStride, packed[r0*pStride:], scales[r0*sStride:], nr, cols, x[t0*cols:], tb)
		}
	}
}

// neonRows runs the kernel for tb ≤ neonMaxT tokens over rows rows; a row
// with a scale byte > 252 gets the generic kernel.
func neonRows(dst []float32, dstStride int, packed, scales []byte, rows, cols int, x []float32, tb int) {
	groups := cols / GroupSize
	pStride, sStride := cols/2, groups
	k := neonKernels[tb]
	ds, xs := 4*dstStride, 4*cols
	for done := 0; done < rows; {
		done += k(&dst[done], ds, &packed[done*pStride], pStride, &scales[done*sStride], sStride, rows-done, groups, &x[0], xs)
		if done == rows {
			break
		}
		// The kernel stopped at the row block holding a special scale: do
		// its first row on its own.
		p, s := packed[done*pStride:(done+1)*pStride], scales[done*sStride:(done+1)*sStride]
		if hasSpecial(s) {
			for t := 0; t < tb; t++ {
				dst[t*dstStride+done] = dotMXFP4(p, s, x[t*cols:(t+1)*cols])
			}
		} else {
			k(&dst[done], ds, &p[0], pStride, &s[0], sStride, 1, groups, &x[0], xs)
		}
		done++
	}
}

func hasSpecial(sc []byte) bool {
	for _, b := range sc {
		if b > 252 {
			return true
		}
	}
	return false
}
