package main

// The vector helpers beside the dense kernels (dot, axpy, f64-accumulating
// rows), the roofline probes and the compressed trunk's word merge.

import "fmt"

// dot32 emits dotF32NEON, the tensor.Dot chain over blocks of 32: 32 lanes
// (eight vectors), each product rounded (FMUL) then added (FADD), never
// fused; lanes folded l_i+l_{i+16}, then +l_{i+8}, then the 8-lane tree.
func dot32() {
	name := "dotF32NEON"
	doc := "// dotF32NEON returns the 32-lane tree dot product of blocks·32 elements (unfused, generic order).\n" +
		"// Requires: arm64 ASIMD."
	text(name, 28, doc, "(a *float32, b *float32, blocks int) float32")
	i("MOVD a+0(FP), R0")
	i("MOVD b+8(FP), R1")
	i("MOVD blocks+16(FP), R2")
	for k := 0; k < 8; k++ {
		zero(16 + k)
	}
	label(name + "_loop")
	i("VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]")
	i("VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]")
	i("VLD1.P 64(R1), [V8.S4, V9.S4, V10.S4, V11.S4]")
	i("VLD1.P 64(R1), [V12.S4, V13.S4, V14.S4, V15.S4]")
	for k := 0; k < 8; k++ {
		fmulV(k, k, 8+k)
		faddV(16+k, 16+k, k)
	}
	i("SUBS $1, R2, R2")
	i("BNE %s_loop", name)
	for k := 0; k < 4; k++ {
		faddV(16+k, 16+k, 20+k) // l_i + l_{i+16}
	}
	faddV(16, 16, 18) // + l_{i+8}
	faddV(17, 17, 19)
	faddV(16, 16, 17) // q_i + q_{i+4}
	faddpV(16, 16, 16)
	faddpS(16, 16)
	i("FMOVS F16, ret+24(FP)")
	i("RET")
}

// axpy32 emits axpyF32NEON: y += float32(a·x) over blocks of 32, the product
// rounded before the add (never fused).
func axpy32() {
	name := "axpyF32NEON"
	doc := "// axpyF32NEON computes y += a·x over blocks·32 elements (unfused, generic order).\n" +
		"// Requires: arm64 ASIMD."
	text(name, 32, doc, "(y *float32, a float32, x *float32, blocks int)")
	i("MOVD y+0(FP), R0")
	i("FMOVS a+8(FP), F31")
	i("VDUP V31.S[0], V31.S4")
	i("MOVD x+16(FP), R1")
	i("MOVD blocks+24(FP), R2")
	label(name + "_loop")
	for h := 0; h < 2; h++ {
		i("VLD1.P 64(R1), [V0.S4, V1.S4, V2.S4, V3.S4]")
		i("VLD1 (R0), [V4.S4, V5.S4, V6.S4, V7.S4]")
		for k := 0; k < 4; k++ {
			fmulV(k, k, 31)
			faddV(4+k, 4+k, k)
		}
		i("VST1.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)")
	}
	i("SUBS $1, R2, R2")
	i("BNE %s_loop", name)
	i("RET")
}

// rowsF64 emits dotRowsF64<F32|BF16>NEON, the MatVecF64Acc chain over blocks
// of 16 columns: 16 f64 lanes (eight vectors), column c to lane c mod 16;
// the weight widened exactly to f64 and multiplied by x (f32 widened to
// f64) with FMLA: the product of two values of at most 24 significant bits
// is exact in f64, so the fused add rounds exactly as the generic add of
// the product; lanes folded l_i+l_{i+8}, then the tree
// ((m0+m4)+(m1+m5))+((m2+m6)+(m3+m7)).
func rowsF64(bf16 bool) {
	kind := "F32"
	if bf16 {
		kind = "BF16"
	}
	name := "dotRowsF64" + kind + "NEON"
	doc := fmt.Sprintf("// %s computes dst[r] = Σ_c float64(w[r][c])·x[c] over blocks·16 columns of %s weights\n"+
		"// (rows stride bytes apart) with 16 f64 lanes and a fixed tree (the same bits as the generic code).\n"+
		"// Requires: arm64 ASIMD.", name, kind)
	text(name, 48, doc, "(dst *float64, w *byte, stride int, rows int, blocks int, x *float64)")
	i("MOVD dst+0(FP), R0")
	i("MOVD w+8(FP), R1")
	i("MOVD stride+16(FP), R2")
	i("MOVD rows+24(FP), R3")
	i("MOVD blocks+32(FP), R4")
	i("MOVD x+40(FP), R5")
	if bf16 {
		zero(6)
	}
	label(name + "_row")
	i("CBZ R3, %s_done", name)
	i("MOVD R1, R6")
	i("MOVD R5, R7")
	i("MOVD R4, R8")
	for k := 0; k < 8; k++ {
		zero(16 + k)
	}
	label(name + "_block")
	// The weights of 16 columns as f32 in V0..V3.
	if bf16 {
		i("VLD1.P 32(R6), [V4.H8, V5.H8]")
		widen(4, 6, 0, 1)
		widen(5, 6, 2, 3)
	} else {
		i("VLD1.P 64(R6), [V0.S4, V1.S4, V2.S4, V3.S4]")
	}
	i("VLD1.P 64(R7), [V24.D2, V25.D2, V26.D2, V27.D2]")
	i("VLD1.P 64(R7), [V28.D2, V29.D2, V30.D2, V31.D2]")
	for k := 0; k < 8; k++ {
		fcvtl(8+k, k/2, k%2 == 1)
	}
	for k := 0; k < 8; k++ {
		i("VFMLA V%d.D2, V%d.D2, V%d.D2", 24+k, 8+k, 16+k)
	}
	i("SUBS $1, R8, R8")
	i("BNE %s_block", name)
	for k := 0; k < 4; k++ {
		faddD(16+k, 16+k, 20+k) // m_i = l_i + l_{i+8}
	}
	faddD(16, 16, 18) // (m0+m4), (m1+m5)
	faddD(17, 17, 19) // (m2+m6), (m3+m7)
	faddpD(16, 16, 17)
	faddpScalarD(16, 16)
	i("FMOVD F16, (R0)")
	i("ADD $8, R0, R0")
	i("ADD R2, R1, R1")
	i("SUB $1, R3, R3")
	i("B %s_row", name)
	label(name + "_done")
	i("RET")
}

// fmaPeak emits fmaPeakNEON: iters × 16 independent 4-lane FMLAs (enough
// chains for four pipes of latency 4): the peak-rate probe of k3 bench.
func fmaPeak() {
	name := "fmaPeakNEON"
	doc := "// fmaPeakNEON runs iters × 16 independent 4-lane FMAs (a peak-rate probe).\n// Requires: arm64 ASIMD."
	text(name, 8, doc, "(iters int)")
	i("MOVD iters+0(FP), R0")
	i("CBZ R0, %s_done", name)
	for k := 0; k < 16; k++ {
		zero(16 + k)
	}
	i("VMOVI $1, V0.B16")
	i("VMOVI $2, V1.B16")
	label(name + "_loop")
	for k := 0; k < 16; k++ {
		fmla(16+k, 0, 1)
	}
	i("SUBS $1, R0, R0")
	i("BNE %s_loop", name)
	label(name + "_done")
	i("RET")
}

// readBW emits readBWNEON: reads n bytes (a multiple of 256) with 128-bit
// loads, 256 bytes per iteration: the bandwidth probe of k3 bench.
func readBW() {
	name := "readBWNEON"
	doc := "// readBWNEON reads n bytes (a multiple of 256) through vector loads (a bandwidth probe).\n// Requires: arm64 ASIMD."
	text(name, 16, doc, "(p *byte, n int)")
	i("MOVD p+0(FP), R0")
	i("MOVD n+8(FP), R1")
	i("LSR $8, R1, R1")
	i("CBZ R1, %s_done", name)
	label(name + "_loop")
	for k := 0; k < 4; k++ {
		i("VLD1.P 64(R0), [V%d.S4, V%d.S4, V%d.S4, V%d.S4]", 4*k, 4*k+1, 4*k+2, 4*k+3)
	}
	i("SUBS $1, R1, R1")
	i("BNE %s_loop", name)
	label(name + "_done")
	i("RET")
}

// merge emits mergeNEON, bf16merge's word merge over n words (a multiple of
// 32): the low byte of word i is (exp<<7)|(sm&0x7f) (SLI #7 into a copy of
// sm), the high byte (sm&0x80)|(exp>>1) (SRI #1 into a copy of sm), and
// ZIP1/ZIP2 interleave them into little-endian words.
func merge() {
	name := "mergeNEON"
	doc := "// mergeNEON writes n (a multiple of 32) little-endian words (sm&0x80)<<8 | exp<<7 | sm&0x7f to dst.\n" +
		"// Requires: arm64 ASIMD."
	text(name, 32, doc, "(dst *byte, exp *byte, sm *byte, n int)")
	i("MOVD dst+0(FP), R0")
	i("MOVD exp+8(FP), R1")
	i("MOVD sm+16(FP), R2")
	i("MOVD n+24(FP), R3")
	i("LSR $5, R3, R3")
	i("CBZ R3, %s_done", name)
	label(name + "_loop")
	i("VLD1.P 32(R1), [V0.B16, V1.B16]") // exponent bytes
	i("VLD1.P 32(R2), [V2.B16, V3.B16]") // sign and mantissa bytes
	for k := 0; k < 2; k++ {
		e, m, lo, hi := k, 2+k, 4+2*k, 5+2*k
		i("VORR V%d.B16, V%d.B16, V%d.B16", m, m, lo)
		i("VSLI $7, V%d.B16, V%d.B16", e, lo)
		i("VORR V%d.B16, V%d.B16, V%d.B16", m, m, hi)
		i("VSRI $1, V%d.B16, V%d.B16", e, hi)
		i("VZIP1 V%d.B16, V%d.B16, V%d.B16", hi, lo, 16+2*k)
		i("VZIP2 V%d.B16, V%d.B16, V%d.B16", hi, lo, 17+2*k)
	}
	i("VST1.P [V16.B16, V17.B16, V18.B16, V19.B16], 64(R0)")
	i("SUBS $1, R3, R3")
	i("BNE %s_loop", name)
	label(name + "_done")
	i("RET")
}
