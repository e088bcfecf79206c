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
