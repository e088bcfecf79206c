// Command bf16merge generates internal/platform/kernel/bf16merge/merge_amd64.s: the kernels
// that rebuild 16-bit words from a compressed trunk block's two byte
// streams, for AVX2 and AVX-512.
//
// Word i is (m&0x80)<<8 | e<<7 | m&0x7f for exponent byte e = exp[i] and
// sign+mantissa byte m = sm[i]. Each byte is zero-extended into a 16-bit
// lane (VPMOVZXBW from memory); then c = m | m<<8 holds the sign in bit 15
// and the mantissa in bits 0..6, and the word is c&0x807f | e<<7. The
// kernels handle n words, n a multiple of the kernel's step (the Go code
// merges the rest); loads and stores are unaligned.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/k3go/k3/internal/asmgen/lib"
)

// unroll is the number of vectors of output per loop step.
const unroll = 4

var signMant Mem // [8]u32: 0x807f in each 16-bit lane

func main() {
	ConstraintExpr("!purego")
	signMant = lib.Const32("signMant", lib.Splat32(0x807f807f, 8))
	for _, isa := range []lib.ISA{lib.AVX2, lib.AVX512} {
		merge(isa)
	}
	Generate()
}

func merge(isa lib.ISA) {
	words := isa.Bytes() / 2 // output words per vector
	step := unroll * words
	lib.Func("merge"+isa.Name, "func(dst, exp, sm *byte, n int)",
		fmt.Sprintf("merge%s rebuilds n 16-bit words (n a multiple of %d) from their exponent and sign+mantissa bytes.", isa.Name, step),
		"Requires: "+requires(isa)+".")
	dst, exp, sm, n := Load(Param("dst"), GP64()), Load(Param("exp"), GP64()), Load(Param("sm"), GP64()), Load(Param("n"), GP64())
	mask := isa.Vec()
	if words == 32 {
		VPBROADCASTD(signMant, mask)
	} else {
		VMOVDQU(signMant, mask)
	}
	var l lib.Labeler
	loop, done := l.New("loop"), l.New("done")
	TESTQ(n, n)
	JZ(LabelRef(done))
	Label(loop)
	es, ms := make([]reg.VecVirtual, unroll), make([]reg.VecVirtual, unroll)
	for u := range unroll {
		es[u], ms[u] = isa.Vec(), isa.Vec()
		VPMOVZXBW(Mem{Base: exp, Disp: u * words}, es[u])
		VPMOVZXBW(Mem{Base: sm, Disp: u * words}, ms[u])
	}
	for u := range unroll {
		c := isa.Vec()
		VPSLLW(U8(8), ms[u], c)
		VPSLLW(U8(7), es[u], es[u])
		if words == 32 {
			VPORQ(ms[u], c, c)
			// es = es | (c & mask): truth table over (es, c, mask).
			VPTERNLOGD(U8(0xF8), mask, c, es[u])
		} else {
			VPOR(ms[u], c, c)
			VPAND(mask, c, c)
			VPOR(c, es[u], es[u])
		}
		if words == 32 {
			VMOVDQU64(es[u], Mem{Base: dst, Disp: u * isa.Bytes()})
		} else {
			VMOVDQU(es[u], Mem{Base: dst, Disp: u * isa.Bytes()})
		}
	}
	ADDQ(U32(step), exp)
	ADDQ(U32(step), sm)
	ADDQ(U32(2*step), dst)
	SUBQ(U32(step), n)
	JNZ(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()
}

// requires names the CPU features a kernel uses (no FMA: it only moves bits).
func requires(isa lib.ISA) string {
	if isa.Lanes == 16 {
		return "AVX-512 F/BW"
	}
	return "AVX2"
}
