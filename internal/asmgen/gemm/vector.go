package main

// The roofline probes (peak FMA rate, read bandwidth) and the vector
// helpers beside the dense kernels: f64-accumulating rows, dot and axpy.

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/k3go/k3/internal/asmgen/lib"
)

// fmaPeak runs iters × 12 independent vector FMAs: a probe of the core's
// peak f32 FMA rate.
func fmaPeak(isa lib.ISA) {
	name := "fmaPeak" + isa.Name
	lib.Func(name, "func(iters int)",
		fmt.Sprintf("%s runs iters × 12 independent %d-lane FMAs (a peak-rate probe).", name, isa.Lanes),
		"Requires: "+isa.Requires()+".")
	n := Load(Param("iters"), GP64())
	a, b := isa.Vec(), isa.Vec()
	VXORPS(a, a, a)
	VXORPS(b, b, b)
	accs := make([]reg.VecVirtual, 12)
	for i := range accs {
		accs[i] = isa.Vec()
		VXORPS(accs[i], accs[i], accs[i])
	}
	TESTQ(n, n)
	JZ(LabelRef("fmadone"))
	Label("fmaloop")
	for _, c := range accs {
		VFMADD231PS(a, b, c)
	}
	DECQ(n)
	JNZ(LabelRef("fmaloop"))
	Label("fmadone")
	// Keep the accumulators live.
	for _, c := range accs[1:] {
		VADDPS(c, accs[0], accs[0])
	}
	VZEROUPPER()
	RET()
}

// readBW reads n bytes (a multiple of 8 vectors) with vector loads: a probe
// of the memory read bandwidth. The buffer is read as 8 contiguous streams
// advancing together (as the 8-row mat-vec kernels read their rows), which
// keeps more misses in flight than one stream.
func readBW(isa lib.ISA) {
	name := "readBW" + isa.Name
	lib.Func(name, "func(p *byte, n int)",
		fmt.Sprintf("%s reads n bytes (a multiple of %d) as 8 parallel streams of vector loads (a bandwidth probe).", name, 8*isa.Bytes()),
		"Requires: "+isa.Requires()+".")
	p := Load(Param("p"), GP64())
	n := Load(Param("n"), GP64())
	accs := make([]reg.VecVirtual, 4)
	for i := range accs {
		accs[i] = isa.Vec()
		VXORPS(accs[i], accs[i], accs[i])
	}
	B := isa.Bytes()
	// Stream stride s = n/8 bytes (a multiple of B); iterations = s/B.
	s := GP64()
	MOVQ(n, s)
	SHRQ(U8(3), s)
	s3 := GP64()
	LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
	q := GP64()
	LEAQ(Mem{Base: p, Index: s, Scale: 4}, q)
	SHRQ(U8(3+log2(B)), n)
	TESTQ(n, n)
	JZ(LabelRef("bwdone"))
	Label("bwloop")
	for i := 0; i < 8; i++ {
		base := p
		if i >= 4 {
			base = q
		}
		var m Mem
		switch i % 4 {
		case 0:
			m = Mem{Base: base}
		case 1:
			m = Mem{Base: base, Index: s, Scale: 1}
		case 2:
			m = Mem{Base: base, Index: s, Scale: 2}
		case 3:
			m = Mem{Base: base, Index: s3, Scale: 1}
		}
		if isa.Lanes == 16 {
			VPORD(m, accs[i%4], accs[i%4])
		} else {
			VPOR(m, accs[i%4], accs[i%4])
		}
	}
	ADDQ(U32(B), p)
	ADDQ(U32(B), q)
	DECQ(n)
	JNZ(LabelRef("bwloop"))
	Label("bwdone")
	VZEROUPPER()
	RET()
}

// dotRowsF64 computes, per row, the f64 sum of float64(w)·float64(x) over
// blocks of 16 columns with 16 f64 lanes (column c to lane c mod 16), one
// FMA per lane and block (exact products, so fused or not gives the same
// bits), reduced with the tree of lib.SumF64x16; x is pre-widened to f64.
// The sums go to dst (float64) for the Go code to add the tail columns.
func dotRowsF64(isa lib.ISA, bf16 bool) {
	kind, esz := "F32", 4
	if bf16 {
		kind, esz = "BF16", 2
	}
	name := "dotRowsF64" + kind + isa.Name
	lib.Func(name, "func(dst *float64, w *byte, stride, rows, blocks int, x *float64)",
		fmt.Sprintf("%s computes dst[r] = Σ_c float64(w[r][c])·x[c] over blocks·16 columns of %s weights", name, kind),
		"with 16 f64 lanes and a fixed tree (the same bits on every implementation).",
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	dst := Load(Param("dst"), GP64())
	w := Load(Param("w"), GP64())
	stride := Load(Param("stride"), GP64())
	rows := Load(Param("rows"), GP64())
	perRow := 16 / (isa.Lanes / 2) // f64 accumulators per row
	rowsLoop, end := lb.New("row"), lb.New("rowend")
	Label(rowsLoop)
	TESTQ(rows, rows)
	JZ(LabelRef(end))
	accs := make([]reg.VecVirtual, perRow)
	for i := range accs {
		accs[i] = isa.Vec()
		VXORPD(accs[i], accs[i], accs[i])
	}
	wp := GP64()
	MOVQ(w, wp)
	xp := Load(Param("x"), GP64())
	k := Load(Param("blocks"), GP64())
	loop, kend := lb.New("k"), lb.New("kend")
	TESTQ(k, k)
	JZ(LabelRef(kend))
	Label(loop)
	half := isa.Lanes / 2 // f64 lanes per vector = f32 elements converted per vector
	for i := 0; i < perRow; i++ {
		v := isa.Vec()
		m := Mem{Base: wp, Disp: i * half * esz}
		if bf16 {
			f := isa.Vec()
			if isa.Lanes == 8 {
				VPMOVZXWD(m, f.AsX())
				VPSLLD(U8(16), f.AsX(), f.AsX())
				VCVTPS2PD(f.AsX(), v)
			} else {
				VPMOVZXWD(m, f.AsY())
				VPSLLD(U8(16), f.AsY(), f.AsY())
				VCVTPS2PD(f.AsY(), v)
			}
		} else {
			VCVTPS2PD(m, v)
		}
		VFMADD231PD(Mem{Base: xp, Disp: i * isa.Bytes()}, v, accs[i])
	}
	ADDQ(U32(16*esz), wp)
	ADDQ(U32(16*8), xp)
	DECQ(k)
	JNZ(LabelRef(loop))
	Label(kend)
	// Tree: m_i = l_i + l_{i+8}; a_i = m_i + m_{i+4}; (a0+a1)+(a2+a3).
	var m reg.VecVirtual
	if isa.Lanes == 8 {
		VADDPD(accs[2], accs[0], accs[0]) // lanes 0-3 + 8-11
		VADDPD(accs[3], accs[1], accs[1]) // lanes 4-7 + 12-15
		VADDPD(accs[1], accs[0], accs[0]) // a
		m = accs[0]
	} else {
		VADDPD(accs[1], accs[0], accs[0]) // m (8 lanes)
		y := YMM()
		VEXTRACTF64X4(U8(1), accs[0], y)
		VADDPD(y, accs[0].AsY(), y) // a
		m = y
	}
	hi := XMM()
	if isa.Lanes == 8 {
		VEXTRACTF128(U8(1), m, hi)
	} else {
		VEXTRACTF64X2(U8(1), m, hi)
	}
	lo := m.AsX()
	t := XMM()
	VPERMILPD(U8(1), lo, t)
	VADDSD(t, lo, t) // a0 + a1
	u := XMM()
	VPERMILPD(U8(1), hi, u)
	VADDSD(u, hi, u) // a2 + a3
	VADDSD(u, t, t)
	VMOVSD(t, Mem{Base: dst})
	ADDQ(U8(8), dst)
	ADDQ(stride, w)
	DECQ(rows)
	JMP(LabelRef(rowsLoop))
	Label(end)
	VZEROUPPER()
	RET()
}

// dot32 computes the f32 dot product of blocks·32 elements with 32 lanes
// (element c to lane c mod 32), unfused multiply then add (the generic Go
// order, so every implementation gives the same bits), folded
// l_i + l_{i+16}, then + l_{i+8}, then the 8-lane tree.
func dot32(isa lib.ISA) {
	name := "dotF32" + isa.Name
	lib.Func(name, "func(a, b *float32, blocks int) float32",
		fmt.Sprintf("%s returns the 32-lane tree dot product of blocks·32 elements (unfused, generic order).", name),
		"Requires: "+isa.Requires()+".")
	ap := Load(Param("a"), GP64())
	bp := Load(Param("b"), GP64())
	k := Load(Param("blocks"), GP64())
	n := 32 / isa.Lanes
	accs := make([]reg.VecVirtual, n)
	for i := range accs {
		accs[i] = isa.Vec()
		VXORPS(accs[i], accs[i], accs[i])
	}
	TESTQ(k, k)
	JZ(LabelRef("dotend"))
	Label("dotloop")
	for i := range accs {
		v := isa.Vec()
		VMOVUPS(Mem{Base: ap, Disp: i * isa.Bytes()}, v)
		VMULPS(Mem{Base: bp, Disp: i * isa.Bytes()}, v, v)
		VADDPS(v, accs[i], accs[i])
	}
	ADDQ(U8(128), ap)
	ADDQ(U8(128), bp)
	DECQ(k)
	JNZ(LabelRef("dotloop"))
	Label("dotend")
	if n == 4 {
		VADDPS(accs[2], accs[0], accs[0]) // lanes i + i+16 (i < 8)
		VADDPS(accs[3], accs[1], accs[1]) // lanes i + i+16 (8 ≤ i < 16)
		VADDPS(accs[1], accs[0], accs[0]) // + i+8
	} else {
		VADDPS(accs[1], accs[0], accs[0]) // lanes i + i+16; ReduceTo4 adds i+8
	}
	s := lib.Sum4(isa.ReduceTo4(accs[0]))
	Store(s, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// axpy computes y[i] += a·x[i] for blocks·32 elements, multiply then add
// (unfused, as the generic Go code).
func axpy(isa lib.ISA) {
	name := "axpyF32" + isa.Name
	lib.Func(name, "func(y *float32, a float32, x *float32, blocks int)",
		fmt.Sprintf("%s computes y += a·x over blocks·32 elements (unfused, generic order).", name),
		"Requires: "+isa.Requires()+".")
	yp := Load(Param("y"), GP64())
	xp := Load(Param("x"), GP64())
	k := Load(Param("blocks"), GP64())
	av := isa.Vec()
	VBROADCASTSS(NewParamAddr("a", 8), av)
	TESTQ(k, k)
	JZ(LabelRef("axpyend"))
	Label("axpyloop")
	for i := 0; i < 32/isa.Lanes; i++ {
		v := isa.Vec()
		VMULPS(Mem{Base: xp, Disp: i * isa.Bytes()}, av, v)
		VADDPS(Mem{Base: yp, Disp: i * isa.Bytes()}, v, v)
		VMOVUPS(v, Mem{Base: yp, Disp: i * isa.Bytes()})
	}
	ADDQ(U8(128), xp)
	ADDQ(U8(128), yp)
	DECQ(k)
	JNZ(LabelRef("axpyloop"))
	Label("axpyend")
	VZEROUPPER()
	RET()
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}
