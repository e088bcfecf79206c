// Command expunpack generates internal/platform/kernel/expunpack/unpack_amd64.s: the
// AVX-512 VBMI kernel that turns a fixed-width exponent stream (3-bit codes
// into a 7-entry table, code 7 an escape whose byte follows in order) into
// exponent bytes, 64 per step.
//
// A step takes 24 code bytes (64 codes; the load reads 32). VPERMB puts
// code bytes 3q..3q+7 into quadword q, so the quadword's low 24 bits are
// the 8 codes of output bytes 8q..8q+7; VPMULTISHIFTQB takes, for output
// byte j, the 8 bits of its quadword that start at bit 3j, and an AND keeps
// the code. VPERMB looks the codes up in the table; VPCMPEQB marks the
// escapes, and VPEXPANDB loads that many bytes from the escape list into
// exactly those lanes, in order. A step runs only if the escapes it needs
// are left; otherwise the kernel stops and says how far it got (the Go code
// then finds the stream corrupt).
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"

	"github.com/k3go/k3/internal/asmgen/lib"
)

func main() {
	ConstraintExpr("!purego")
	var gather, shifts [64]byte
	for i := range 64 {
		q, j := i/8, i%8
		gather[i] = byte(min(3*q+j, 31))
		shifts[i] = byte(3 * j)
	}
	gatherIdx := bytesConst("unpackGather", gather[:])
	shiftCtl := bytesConst("unpackShifts", shifts[:])

	lib.Func("unpack3AVX512", "func(exp, codes *byte, groups int, table *[8]byte, escs *byte, nesc int) (done, used int)",
		"unpack3AVX512 decodes up to groups steps of 64 three-bit codes (24 code bytes each; it reads 32) into exp,",
		"taking an escape byte from escs (nesc of them) for every code 7. It stops before a step that needs more",
		"escapes than are left and returns the steps done and the escapes used.",
		"Requires: AVX-512 F/BW/VBMI/VBMI2, POPCNT.")
	exp, codes, groups := Load(Param("exp"), GP64()), Load(Param("codes"), GP64()), Load(Param("groups"), GP64())
	table, escs, nesc := Load(Param("table"), GP64()), Load(Param("escs"), GP64()), Load(Param("nesc"), GP64())
	done, used := GP64(), GP64()
	XORQ(done, done)
	XORQ(used, used)

	idx, ctl, sevens, tab := ZMM(), ZMM(), ZMM(), ZMM()
	VMOVDQU64(gatherIdx, idx)
	VMOVDQU64(shiftCtl, ctl)
	seven := GP32()
	MOVL(U32(0x07070707), seven)
	VPBROADCASTD(seven, sevens)
	// The table's 8 bytes, broadcast: VPERMB indexes its low 64 bytes and
	// the codes are 0..7.
	VPBROADCASTQ(Mem{Base: table}, tab)

	var l lib.Labeler
	loop, out := l.New("loop"), l.New("out")
	CMPQ(done, groups)
	JAE(LabelRef(out))
	Label(loop)
	src, b, c, e := ZMM(), ZMM(), ZMM(), ZMM()
	VMOVDQU(Mem{Base: codes}, src.AsY())
	VPERMB(src, idx, b)
	VPMULTISHIFTQB(b, ctl, c)
	VPANDQ(sevens, c, c)
	k := K()
	VPCMPEQB(sevens, c, k)
	VPERMB(tab, c, e)
	m, cnt, left := GP64(), GP64(), GP64()
	KMOVQ(k, m)
	POPCNTQ(m, cnt)
	MOVQ(nesc, left)
	SUBQ(used, left)
	CMPQ(cnt, left)
	JA(LabelRef(out))
	VPEXPANDB(Mem{Base: escs}, k, e)
	VMOVDQU64(e, Mem{Base: exp})
	ADDQ(cnt, escs)
	ADDQ(cnt, used)
	ADDQ(U32(24), codes)
	ADDQ(U32(64), exp)
	INCQ(done)
	CMPQ(done, groups)
	JB(LabelRef(loop))
	Label(out)
	Store(done, ReturnIndex(0))
	Store(used, ReturnIndex(1))
	VZEROUPPER()
	RET()
	Generate()
}

// bytesConst emits a read-only table of bytes and returns its address.
func bytesConst(name string, b []byte) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i, x := range b {
		DATA(i, U8(x))
	}
	return m
}
