// Package lib holds the code shared by k3's avo generators: the two vector
// instruction sets (AVX2 on YMM, AVX-512 on ZMM), the horizontal reduction
// every kernel ends with, and constant tables.
//
// One Go function emits the same algorithm for both instruction sets where
// the algorithm is the same, so the AVX2 kernels, which CI machines run,
// cover the logic of the AVX-512 kernels, which they may not.
package lib

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ISA describes one vector instruction set.
type ISA struct {
	Name  string // function name suffix: "AVX2" or "AVX512"
	Lanes int    // f32 lanes per vector
	// GEMM register block: rows × tokens accumulators.
	GemmR, GemmT int
	// Rows per block in the mat-vec kernels.
	RowsMV int
}

// AVX2 is the 256-bit instruction set (AVX2 + FMA, 16 vector registers).
var AVX2 = ISA{Name: "AVX2", Lanes: 8, GemmR: 3, GemmT: 4, RowsMV: 8}

// AVX512 is the 512-bit instruction set (AVX-512 F/BW/VL, 32 registers).
var AVX512 = ISA{Name: "AVX512", Lanes: 16, GemmR: 4, GemmT: 6, RowsMV: 8}

// DirectT is the largest token count of the direct (untiled) multi-token
// kernels; their x blocks hold up to DirectT tokens.
const DirectT = 8

// Bytes is the size of one vector.
func (i ISA) Bytes() int { return 4 * i.Lanes }

// Vec allocates a virtual vector register of the full width.
func (i ISA) Vec() reg.VecVirtual {
	if i.Lanes == 16 {
		return ZMM()
	}
	return YMM()
}

// Requires returns the feature list for the function documentation.
func (i ISA) Requires() string {
	if i.Lanes == 16 {
		return "AVX-512 F/BW/VL"
	}
	return "AVX2, FMA"
}

// Func starts a function with a noescape stub and a doc line.
func Func(name, sig string, doc ...string) {
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc...)
}

// Labeler makes function-unique label names.
type Labeler struct{ n int }

// New returns a fresh label name with the given prefix.
func (l *Labeler) New(prefix string) string {
	l.n++
	return fmt.Sprintf("%s_%d", prefix, l.n)
}

// ReduceTo4 folds a full-width accumulator to an XMM holding
// a_i = l_i + l_{i+4} (8 lanes), or, for 16 lanes, first m_i = l_i + l_{i+8}
// and then a_i = m_i + m_{i+4}. The returned register is a fresh virtual XMM.
func (i ISA) ReduceTo4(acc reg.VecVirtual) reg.VecVirtual {
	if i.Lanes == 16 {
		y := YMM()
		VEXTRACTF64X4(U8(1), acc, y)
		VADDPS(y, acc.AsY(), y) // lo + hi
		x := XMM()
		VEXTRACTF32X4(U8(1), y, x)
		VADDPS(x, y.AsX(), x)
		return x
	}
	x := XMM()
	VEXTRACTF128(U8(1), acc, x)
	VADDPS(x, acc.AsX(), x) // lo + hi
	return x
}

// Sum4 reduces a = [a0 a1 a2 a3] to (a0+a1)+(a2+a3) in lane 0 of a fresh
// register. Together with ReduceTo4 this is the tree
// ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) of the Go reference reduction (and,
// for 16 lanes, that tree over l_i + l_{i+8}). Only instructions with EVEX
// forms are used, so the registers may be X16..X31 in AVX-512 code.
func Sum4(a reg.VecVirtual) reg.VecVirtual {
	t := XMM()
	VPERMILPS(U8(0xB1), a, t) // [a1 a0 a3 a2]
	VADDPS(t, a, t)           // [a0+a1, ., a2+a3, .]
	u := XMM()
	VPERMILPS(U8(0x4E), t, u) // [t2 t3 t0 t1]
	VADDPS(u, t, u)           // lane 0: (a0+a1)+(a2+a3)
	return u
}

// ReduceStore stores the tree sum of each accumulator to consecutive f32
// slots at dst.
func (i ISA) ReduceStore(accs []reg.VecVirtual, dst reg.Register) {
	for k, a := range accs {
		s := Sum4(i.ReduceTo4(a))
		VMOVSS(s, Mem{Base: dst, Disp: 4 * k})
	}
}

// Const32 emits a read-only table of 32-bit words and returns its address.
func Const32(name string, words []uint32) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for k, w := range words {
		DATA(4*k, U32(w))
	}
	return m
}

// Splat32 returns n copies of w.
func Splat32(w uint32, n int) []uint32 {
	s := make([]uint32, n)
	for k := range s {
		s[k] = w
	}
	return s
}
