// Command gemm generates internal/platform/kernel/gemm/gemm_amd64.s: the dense f32
// and bf16 kernels shared by the tensor and quant packages, for AVX2 and
// AVX-512.
//
// Arithmetic contract (both instruction sets, L = lanes = 8 or 16): the dot
// product of one row with one token keeps one L-lane f32 accumulator;
// element c of the row (in the kernel's element order) goes to lane c mod L
// and is added with one fused multiply-add, chunks of L in order; the lanes
// are then reduced with a fixed tree (lib.ReduceTo4, lib.Sum4). The mat-vec
// kernels (dotRows*) and the packed GEMM (gemm*) perform exactly this chain
// for every (row, token), so a token in a batch gets the bits of a one-token
// call.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/k3go/k3/internal/asmgen/lib"
)

func main() {
	ConstraintExpr("!purego")
	for _, isa := range []lib.ISA{lib.AVX2, lib.AVX512} {
		dotRows(isa, false)
		dotRows(isa, true)
		for t := 2; t <= lib.DirectT; t++ {
			dotRowsT(isa, false, t)
			dotRowsT(isa, true, t)
		}
		pack(isa, false)
		pack(isa, true)
		gemm(isa)
		fmaPeak(isa)
		readBW(isa)
		dotRowsF64(isa, false)
		dotRowsF64(isa, true)
		dot32(isa)
		axpy(isa)
	}
	Generate()
}

// dotRows: dst[r] = tree(Σ_k fma(w[r][k-th chunk], x[k-th chunk])) for
// rows r < rows, chunks of L elements; rows are stride bytes apart.
func dotRows(isa lib.ISA, bf16 bool) {
	kind := "F32"
	if bf16 {
		kind = "BF16"
	}
	dotRowsOpt(isa, bf16, "dotRows"+kind+isa.Name, isa.RowsMV)
}

// dotRowsOpt emits a mat-vec kernel with R rows per block. (Measured on
// Zen 3: 8 rows beat 4 and 12; software prefetch did not help.)
func dotRowsOpt(isa lib.ISA, bf16 bool, name string, R int) {
	kind, esz := "F32", 4
	if bf16 {
		kind, esz = "BF16", 2
	}
	lib.Func(name, "func(dst *float32, w *byte, stride, rows, chunks int, x *float32)",
		fmt.Sprintf("%s computes dst[r] = Σ_c w[r][c]·x[c] for r < rows and c < chunks·%d,", name, isa.Lanes),
		fmt.Sprintf("with %s weights rows stride bytes apart (k3's fixed-order reduction).", kind),
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	dst := Load(Param("dst"), GP64())
	w := Load(Param("w"), GP64())
	stride := Load(Param("stride"), GP64())
	rows := Load(Param("rows"), GP64())
	s3 := GP64()
	LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, s3)
	done := lb.New("done")
	step := isa.Lanes * esz // weight bytes per row per chunk

	body := func(r int) {
		accs := make([]reg.VecVirtual, r)
		for i := range accs {
			accs[i] = isa.Vec()
			VXORPS(accs[i], accs[i], accs[i])
		}
		// One base pointer per 4 rows.
		bases := make([]reg.GPVirtual, (r+3)/4)
		for b := range bases {
			bases[b] = GP64()
			if b == 0 {
				MOVQ(w, bases[b])
			} else {
				LEAQ(Mem{Base: bases[b-1], Index: stride, Scale: 4}, bases[b])
			}
		}
		rowMem := func(i, disp int) Mem {
			base := bases[i/4]
			switch i % 4 {
			case 1:
				return Mem{Base: base, Index: stride, Scale: 1, Disp: disp}
			case 2:
				return Mem{Base: base, Index: stride, Scale: 2, Disp: disp}
			case 3:
				return Mem{Base: base, Index: s3, Scale: 1, Disp: disp}
			}
			return Mem{Base: base, Disp: disp}
		}
		xp := Load(Param("x"), GP64())
		k := Load(Param("chunks"), GP64())
		chunk := func() {
			xv := isa.Vec()
			VMOVUPS(Mem{Base: xp}, xv)
			for i := 0; i < r; i++ {
				m := rowMem(i, 0)
				if bf16 {
					t := isa.Vec()
					VPMOVZXWD(m, t)
					VPSLLD(U8(16), t, t)
					VFMADD231PS(xv, t, accs[i])
				} else {
					VFMADD231PS(m, xv, accs[i])
				}
			}
			for _, b := range bases {
				ADDQ(U32(step), b)
			}
			ADDQ(U32(isa.Bytes()), xp)
		}
		loop, end := lb.New("k"), lb.New("kend")
		TESTQ(k, k)
		JZ(LabelRef(end))
		Label(loop)
		chunk()
		DECQ(k)
		JNZ(LabelRef(loop))
		Label(end)
		isa.ReduceStore(accs, dst)
	}

	// Full blocks of R rows.
	loop, edge := lb.New("rows"), lb.New("edge")
	Label(loop)
	CMPQ(rows, U32(R))
	JL(LabelRef(edge))
	body(R)
	ADDQ(U32(4*R), dst)
	t := GP64()
	IMUL3Q(U32(R), stride, t)
	ADDQ(t, w)
	SUBQ(U32(R), rows)
	JMP(LabelRef(loop))
	// Edge: 1..R-1 rows.
	Label(edge)
	var labels []string
	for r := 1; r < R; r++ {
		l := lb.New(fmt.Sprintf("edge%d", r))
		labels = append(labels, l)
		CMPQ(rows, U32(r))
		JE(LabelRef(l))
	}
	JMP(LabelRef(done))
	for r := 1; r < R; r++ {
		Label(labels[r-1])
		body(r)
		JMP(LabelRef(done))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

// dotRowsT is the direct kernel for T tokens (2 ≤ T ≤ lib.DirectT): every
// chunk of a row is loaded (and widened) once and multiplied with the T
// tokens' chunks (x packed as [chunk][T][L]); one accumulator per (row,
// token), the same chain as dotRows and the GEMM. Rows are processed
// several at a time (directRows), so that each load of a token's chunk
// feeds several rows: at 8 tokens the packed x of a whole row (7168
// columns: 224 KiB) comes from L2, and one row per load made the kernel
// wait on L2, not on the FMAs. Results go to dst[t·dstStride/4 + r].
func dotRowsT(isa lib.ISA, bf16 bool, T int) {
	kind, esz := "F32", 4
	if bf16 {
		kind, esz = "BF16", 2
	}
	R := directRows(isa, T)
	name := fmt.Sprintf("dotRowsT%d%s%s", T, kind, isa.Name)
	lib.Func(name, "func(dst *float32, dstStride int, w *byte, stride, rows, chunks int, x *float32)",
		fmt.Sprintf("%s computes rows × %d tokens of %s weights (dstStride in bytes) with k3's fixed-order reduction.", name, T, kind),
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	dst := Load(Param("dst"), GP64())
	w := Load(Param("w"), GP64())
	stride := Load(Param("stride"), GP64())
	rows := Load(Param("rows"), GP64())
	done := lb.New("done")
	B := isa.Bytes()
	step := isa.Lanes * esz

	body := func(r int) {
		accs := make([][]reg.VecVirtual, r)
		for i := range accs {
			accs[i] = make([]reg.VecVirtual, T)
			for j := range accs[i] {
				accs[i][j] = isa.Vec()
				VXORPS(accs[i][j], accs[i][j], accs[i][j])
			}
		}
		wp := GP64()
		MOVQ(w, wp)
		var s3 reg.GPVirtual
		if r > 3 {
			s3 = GP64()
			LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, s3)
		}
		xp := Load(Param("x"), GP64())
		k := Load(Param("chunks"), GP64())
		loop, end := lb.New("k"), lb.New("kend")
		TESTQ(k, k)
		JZ(LabelRef(end))
		Label(loop)
		for i := 0; i < r; i++ {
			m := Mem{Base: wp}
			switch i {
			case 1, 2:
				m = Mem{Base: wp, Index: stride, Scale: uint8(i)}
			case 3:
				m = Mem{Base: wp, Index: s3, Scale: 1}
			}
			v := isa.Vec()
			if bf16 {
				VPMOVZXWD(m, v)
				VPSLLD(U8(16), v, v)
			} else {
				VMOVUPS(m, v)
			}
			for j := 0; j < T; j++ {
				VFMADD231PS(Mem{Base: xp, Disp: j * B}, v, accs[i][j])
			}
		}
		ADDQ(U32(step), wp)
		ADDQ(U32(T*B), xp)
		DECQ(k)
		JNZ(LabelRef(loop))
		Label(end)
		d := GP64()
		MOVQ(dst, d)
		ds := Load(Param("dstStride"), GP64())
		for j := 0; j < T; j++ {
			if j > 0 {
				ADDQ(ds, d)
			}
			col := make([]reg.VecVirtual, r)
			for i := range col {
				col[i] = accs[i][j]
			}
			isa.ReduceStore(col, d)
		}
	}
	if R > 1 && R != 2 && R != 4 {
		panic("row block must be 1, 2 or 4")
	}
	loop, edge := lb.New("rows"), lb.New("edge")
	Label(loop)
	CMPQ(rows, U32(R))
	JL(LabelRef(edge))
	body(R)
	ADDQ(U32(4*R), dst)
	for i := 0; i < R; i++ {
		ADDQ(stride, w)
	}
	SUBQ(U32(R), rows)
	JMP(LabelRef(loop))
	Label(edge)
	var labels []string
	for r := 1; r < R; r++ {
		l := lb.New(fmt.Sprintf("edge%d", r))
		labels = append(labels, l)
		CMPQ(rows, U32(r))
		JE(LabelRef(l))
	}
	JMP(LabelRef(done))
	for r := 1; r < R; r++ {
		Label(labels[r-1])
		body(r)
		JMP(LabelRef(done))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

// directRows is the row block of the direct kernel for T tokens: R·T
// accumulators plus R weight vectors must fit the registers with room to
// spare (16 on AVX2: at most 8 accumulators; 32 on AVX-512: at most 28
// registers in all), R in 1, 2, 4.
func directRows(isa lib.ISA, T int) int {
	if isa.Lanes < 16 {
		return max(1, 8/T)
	}
	for _, r := range []int{4, 2} {
		if r*T+r <= 28 {
			return r
		}
	}
	return 1
}

// pack copies rows of f32 or bf16 weights, widened to f32, into the packed
// GEMM layout: row r, chunk k goes to
// dst[(r/R)·blockStride + (k·R + r%R)·L] (blockStride in bytes).
func pack(isa lib.ISA, bf16 bool) {
	kind, esz := "F32", 4
	if bf16 {
		kind, esz = "BF16", 2
	}
	name := "pack" + kind + isa.Name
	lib.Func(name, "func(dst *float32, blockStride int, w *byte, stride, rows, chunks int)",
		fmt.Sprintf("%s widens rows of %s weights (stride bytes apart), chunks·%d elements each,", name, kind, isa.Lanes),
		fmt.Sprintf("into the packed GEMM layout of %d-row blocks.", isa.GemmR),
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	dst := Load(Param("dst"), GP64())
	w := Load(Param("w"), GP64())
	rows := Load(Param("rows"), GP64())
	R := isa.GemmR
	slot := GP64() // r % R
	XORQ(slot, slot)
	rowDst := GP64()
	MOVQ(dst, rowDst)
	rloop, rend := lb.New("row"), lb.New("rowend")
	Label(rloop)
	TESTQ(rows, rows)
	JZ(LabelRef(rend))
	wp := GP64()
	MOVQ(w, wp)
	dp := GP64()
	MOVQ(rowDst, dp)
	k := Load(Param("chunks"), GP64())
	kloop, kend := lb.New("k"), lb.New("kend")
	TESTQ(k, k)
	JZ(LabelRef(kend))
	Label(kloop)
	v := isa.Vec()
	if bf16 {
		VPMOVZXWD(Mem{Base: wp}, v)
		VPSLLD(U8(16), v, v)
	} else {
		VMOVUPS(Mem{Base: wp}, v)
	}
	VMOVUPS(v, Mem{Base: dp})
	ADDQ(U32(isa.Lanes*esz), wp)
	ADDQ(U32(R*isa.Bytes()), dp)
	DECQ(k)
	JNZ(LabelRef(kloop))
	Label(kend)
	// Next row.
	ADDQ(Load(Param("stride"), GP64()), w)
	DECQ(rows)
	INCQ(slot)
	ADDQ(U32(isa.Bytes()), rowDst)
	CMPQ(slot, U32(R))
	JNE(LabelRef(rloop))
	XORQ(slot, slot)
	ADDQ(Load(Param("blockStride"), GP64()), dst)
	MOVQ(dst, rowDst)
	JMP(LabelRef(rloop))
	Label(rend)
	VZEROUPPER()
	RET()
}

// gemm accumulates acc += tile·x over packed operands:
//
//	tile: [rowBlocks][chunks][R][L]        (R = isa.GemmR rows per block)
//	x:    token blocks of T (the last may be shorter, Tb tokens):
//	      [chunks][Tb][L] each, one after the other
//	acc:  [rowBlocks][tokens][R][L]
//
// Token blocks are the outer loop so that one block of x stays in L1 while
// the row blocks stream from L2.
func gemm(isa lib.ISA) {
	name := "gemm" + isa.Name
	R, T, B := isa.GemmR, isa.GemmT, isa.Bytes()
	lib.Func(name, "func(acc *float32, tile *float32, x *float32, rowBlocks, tokens, chunks int)",
		fmt.Sprintf("%s accumulates acc += tile·x over k3's packed GEMM layout (%d rows × %d tokens per register block).", name, R, T),
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	accTok := Load(Param("acc"), GP64()) // acc + t0·R·B
	xBlk := Load(Param("x"), GP64())     // x + t0·chunks·B
	tokens := Load(Param("tokens"), GP64())
	done := lb.New("done")

	// micro runs one register block of R rows × t tokens over all chunks.
	micro := func(t int, tp, xp0, ap reg.Register) {
		accs := make([][]reg.VecVirtual, R)
		for i := range accs {
			accs[i] = make([]reg.VecVirtual, t)
			for j := range accs[i] {
				accs[i][j] = isa.Vec()
				VMOVUPS(Mem{Base: ap, Disp: (j*R + i) * B}, accs[i][j])
			}
		}
		wp := GP64()
		MOVQ(tp, wp)
		xp := GP64()
		MOVQ(xp0, xp)
		k := Load(Param("chunks"), GP64())
		loop, end := lb.New("k"), lb.New("kend")
		TESTQ(k, k)
		JZ(LabelRef(end))
		Label(loop)
		wv := make([]reg.VecVirtual, R)
		for i := range wv {
			wv[i] = isa.Vec()
			VMOVUPS(Mem{Base: wp, Disp: i * B}, wv[i])
		}
		for j := 0; j < t; j++ {
			xv := isa.Vec()
			VMOVUPS(Mem{Base: xp, Disp: j * B}, xv)
			for i := 0; i < R; i++ {
				VFMADD231PS(xv, wv[i], accs[i][j])
			}
		}
		ADDQ(U32(R*B), wp)
		ADDQ(U32(t*B), xp)
		DECQ(k)
		JNZ(LabelRef(loop))
		Label(end)
		for i := range accs {
			for j := range accs[i] {
				VMOVUPS(accs[i][j], Mem{Base: ap, Disp: (j*R + i) * B})
			}
		}
	}

	// rowLoop runs micro(t) over every row block for the token block at
	// (accTok, xBlk).
	rowLoop := func(t int) {
		rb := Load(Param("rowBlocks"), GP64())
		tp := Load(Param("tile"), GP64())
		ap := GP64()
		MOVQ(accTok, ap)
		// Per row block: tile advances chunks·R·B, acc advances tokens·R·B.
		tileStep := Load(Param("chunks"), GP64())
		IMUL3Q(U32(R*B), tileStep, tileStep)
		accStep := Load(Param("tokens"), GP64())
		IMUL3Q(U32(R*B), accStep, accStep)
		loop, end := lb.New("rb"), lb.New("rbend")
		TESTQ(rb, rb)
		JZ(LabelRef(end))
		Label(loop)
		micro(t, tp, xBlk, ap)
		ADDQ(tileStep, tp)
		ADDQ(accStep, ap)
		DECQ(rb)
		JNZ(LabelRef(loop))
		Label(end)
	}

	tloop, tedge := lb.New("tok"), lb.New("tokedge")
	Label(tloop)
	CMPQ(tokens, U32(T))
	JL(LabelRef(tedge))
	rowLoop(T)
	ADDQ(U32(T*R*B), accTok)
	xs := Load(Param("chunks"), GP64())
	IMUL3Q(U32(T*B), xs, xs)
	ADDQ(xs, xBlk)
	SUBQ(U32(T), tokens)
	JMP(LabelRef(tloop))
	Label(tedge)
	var labels []string
	for t := 1; t < T; t++ {
		l := lb.New(fmt.Sprintf("tok%d", t))
		labels = append(labels, l)
		CMPQ(tokens, U32(t))
		JE(LabelRef(l))
	}
	JMP(LabelRef(done))
	for t := 1; t < T; t++ {
		Label(labels[t-1])
		rowLoop(t)
		JMP(LabelRef(done))
	}
	Label(done)
	VZEROUPPER()
	RET()
}

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
