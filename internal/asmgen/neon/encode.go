package main

// One helper per emitted instruction, and the few composite sequences
// (widening, reduction, function headers) every kernel uses.

import "fmt"

// i emits one instruction line.
func i(format string, args ...any) { fmt.Fprintf(&asm, "\t"+format+"\n", args...) }

// label emits a label.
func label(l string) { fmt.Fprintf(&asm, "%s:\n", l) }

// word emits an instruction the Go assembler does not know.
func word(enc uint32, mnemonic string) { i("WORD $0x%08x // %s", enc, mnemonic) }

// faddV emits FADD Vd.4S, Vn.4S, Vm.4S.
func faddV(d, n, m int) {
	word(0x4e20d400|uint32(m)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("FADD V%d.4S, V%d.4S, V%d.4S", d, n, m))
}

// faddpV emits FADDP Vd.4S, Vn.4S, Vm.4S.
func faddpV(d, n, m int) {
	word(0x6e20d400|uint32(m)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("FADDP V%d.4S, V%d.4S, V%d.4S", d, n, m))
}

// faddpS emits FADDP Sd, Vn.2S.
func faddpS(d, n int) {
	word(0x7e30d800|uint32(n)<<5|uint32(d), fmt.Sprintf("FADDP S%d, V%d.2S", d, n))
}

// fmulV emits FMUL Vd.4S, Vn.4S, Vm.4S.
func fmulV(d, n, m int) {
	word(0x6e20dc00|uint32(m)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("FMUL V%d.4S, V%d.4S, V%d.4S", d, n, m))
}

// faddD emits FADD Vd.2D, Vn.2D, Vm.2D.
func faddD(d, n, m int) {
	word(0x4e60d400|uint32(m)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("FADD V%d.2D, V%d.2D, V%d.2D", d, n, m))
}

// faddpD emits FADDP Vd.2D, Vn.2D, Vm.2D.
func faddpD(d, n, m int) {
	word(0x6e60d400|uint32(m)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("FADDP V%d.2D, V%d.2D, V%d.2D", d, n, m))
}

// faddpScalarD emits FADDP Dd, Vn.2D.
func faddpScalarD(d, n int) {
	word(0x7e70d800|uint32(n)<<5|uint32(d), fmt.Sprintf("FADDP D%d, V%d.2D", d, n))
}

// fcvtl emits FCVTL Vd.2D, Vn.2S (lanes 0, 1) or, hi, FCVTL2 Vd.2D, Vn.4S
// (lanes 2, 3): exact widening.
func fcvtl(d, n int, hi bool) {
	if hi {
		word(0x4e617800|uint32(n)<<5|uint32(d), fmt.Sprintf("FCVTL2 V%d.2D, V%d.4S", d, n))
		return
	}
	word(0x0e617800|uint32(n)<<5|uint32(d), fmt.Sprintf("FCVTL V%d.2D, V%d.2S", d, n))
}

// reduceStore reduces the accumulator pair (a, b) with the lane tree and
// stores the f32 result at off(base). a is clobbered.
func reduceStore(a, b int, off int, base string) {
	faddV(a, a, b)  // m_i = l_i + l_{i+4}
	faddpV(a, a, a) // m0+m1, m2+m3
	faddpS(a, a)    // (m0+m1)+(m2+m3)
	i("FMOVS F%d, %d(%s)", a, off, base)
}

func zero(v int) { i("VEOR V%d.B16, V%d.B16, V%d.B16", v, v, v) }

// widen writes the f32 values of the bf16 words 0..3 of h to lo and of words
// 4..7 to hi (each word w becomes the bits w<<16, exactly; USHLL cannot shift
// by 16 and the Go assembler has no SHLL), z holding zero.
func widen(h, z, lo, hi int) {
	i("VZIP1 V%d.H8, V%d.H8, V%d.H8", h, z, lo)
	i("VZIP2 V%d.H8, V%d.H8, V%d.H8", h, z, hi)
}

// fmla emits acc += w·x (fused), 4 lanes.
func fmla(acc, w, x int) { i("VFMLA V%d.S4, V%d.S4, V%d.S4", x, w, acc) }

// text starts a function.
func text(name string, frame int, doc string, sig string) {
	fmt.Fprintf(&asm, "\n// func %s%s\nTEXT ·%s(SB), NOSPLIT, $0-%d\n", name, sig, name, frame)
	fmt.Fprintf(&decl, "\n%s\n//\n//go:noescape\nfunc %s%s\n", doc, name, sig)
}
