// Command mxfp4 generates quant/mxfp4_amd64.s: the MXFP4 × f32 kernels for
// AVX2 and AVX-512.
//
// Every kernel decodes a group of 32 E2M1 codes in registers into the exact
// f32 weights E2M1[code]·2^(s−127) (the product of two powers of two times a
// small integer is exact for every scale byte s ≤ 252) and feeds them to the
// same one-accumulator FMA chain as the dense kernels (see the gemm
// generator). Rows with a scale byte ≥ 253 (255 skips a group; 253 and 254
// can overflow a dequantised weight) are not handled here: the kernels stop
// at them and return the row index, and the Go code runs the generic kernel
// for that row.
//
// Element order inside a group (the Go code permutes x to match):
//
//	AVX2:    chunks {0,4,8,12,1,5,9,13}, {2,6,10,14,3,7,11,15}, then +16
//	AVX-512: chunks {0,2,...,30}, {1,3,...,31}
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/k3go/k3/internal/asmgen/lib"
)

// rowsMV is the row block of the mat-vec kernel.
const rowsMV = 4

// maxScale is the largest scale byte the kernels handle.
const maxScale = 252

var (
	scaleTab Mem // [256]f32: 2^(s-127), 0 for s > maxScale
	e2m1Tab  Mem // AVX-512: [16]f32 E2M1 values
	maskLow  Mem // [8]u32 0x0F0F0F0F
	maskHigh Mem // [8]u32 0xFFFF0000
	// AVX2: for each scale byte s ≤ maxScale, 16 bytes holding the bf16
	// high byte and 16 bytes holding the bf16 low byte of E2M1[c]·2^(s−127)
	// (exact in bf16, subnormals included), indexed by code c.
	scaledTabs Mem
	nibShift   Mem // [8]u32 {0,0,0,0,4,4,4,4}: lane 1 gets the high nibbles
)

var e2m1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

func main() {
	ConstraintExpr("!purego")
	tables()
	for _, isa := range []lib.ISA{lib.AVX2, lib.AVX512} {
		rows(isa)
		tile(isa)
	}
	Generate()
}

func tables() {
	var s [256]uint32
	for k := 0; k <= maxScale; k++ {
		if k == 0 {
			s[k] = 0x00400000 // 2^-127, subnormal
		} else {
			s[k] = uint32(k) << 23
		}
	}
	scaleTab = lib.Const32("scaleTab", s[:])
	var e [16]uint32
	for c, v := range e2m1 {
		e[c] = math.Float32bits(v)
	}
	e2m1Tab = lib.Const32("e2m1Tab", e[:])
	maskLow = lib.Const32("maskLow", lib.Splat32(0x0F0F0F0F, 8))
	nibShift = lib.Const32("nibShift", []uint32{0, 0, 0, 0, 4, 4, 4, 4})
	var st []uint32
	for sc := 0; sc < 256; sc++ {
		var hi, lo [16]byte
		if sc <= maxScale {
			for c, v := range e2m1 {
				f := float32(math.Ldexp(float64(v), sc-127))
				if float64(f) != math.Ldexp(float64(v), sc-127) {
					panic("scaled E2M1 value is not exact")
				}
				b := math.Float32bits(f)
				if b&0xFFFF != 0 {
					panic("scaled E2M1 value is not bf16")
				}
				hi[c], lo[c] = byte(b>>24), byte(b>>16)
			}
		}
		for _, t := range [][16]byte{hi, lo} {
			for k := 0; k < 16; k += 4 {
				st = append(st, uint32(t[k])|uint32(t[k+1])<<8|uint32(t[k+2])<<16|uint32(t[k+3])<<24)
			}
		}
	}
	scaledTabs = lib.Const32("scaledTabs", st)
	maskHigh = lib.Const32("maskHigh", lib.Splat32(0xFFFF0000, 8))
}

// consts holds the decode constants in registers.
type consts struct {
	tab         reg.GPVirtual // scale table address
	mLow, mHigh Op            // registers, or memory when registers are short
	stabs       reg.GPVirtual // AVX2 scaled tables address
	e2m1        reg.VecVirtual
}

func loadConsts(isa lib.ISA) consts { return loadConstsR(isa, 4) }

func loadConstsR(isa lib.ISA, rowsLive int) consts {
	var c consts
	c.tab = GP64()
	LEAQ(scaleTab, c.tab)
	if isa.Lanes == 8 {
		c.stabs = GP64()
		LEAQ(scaledTabs, c.stabs)
		if rowsLive > 4 {
			c.mLow, c.mHigh = maskLow, maskHigh
		} else {
			ml, mh := YMM(), YMM()
			VMOVDQU(maskLow, ml)
			VMOVDQU(maskHigh, mh)
			c.mLow, c.mHigh = ml, mh
		}
	} else {
		c.e2m1 = ZMM()
		VMOVUPS(e2m1Tab, c.e2m1)
	}
	return c
}

// chunksPerGroup is the number of vectors one group of 32 decodes into.
func chunksPerGroup(isa lib.ISA) int { return 32 / isa.Lanes }

// scaleRef is a group's scale: for AVX-512 the broadcast f32 2^(s−127),
// for AVX2 the byte offset of the scaled tables of s.
type scaleRef struct {
	vec reg.VecVirtual
	off reg.GPVirtual
}

// scale loads scale byte sm and jumps to bail if it is > maxScale.
func scale(isa lib.ISA, c consts, sm Mem, bail string) scaleRef {
	s := GP32()
	MOVBLZX(sm, s)
	CMPL(s, U32(maxScale))
	JA(LabelRef(bail))
	if isa.Lanes == 8 {
		SHLL(U8(5), s)
		return scaleRef{off: s}
	}
	v := isa.Vec()
	VBROADCASTSS(Mem{Base: c.tab, Index: s, Scale: 4}, v)
	return scaleRef{vec: v}
}

// decode decodes the 16 packed bytes at pm with scale sr and calls use(k, w)
// for each chunk k of the group in order, w holding the exact scaled
// weights E2M1[code]·2^(s−127).
func decode(isa lib.ISA, c consts, pm Mem, sr scaleRef, use func(k int, w reg.VecVirtual)) {
	if isa.Lanes == 16 {
		d := ZMM()
		VPMOVZXBD(pm, d)
		t := ZMM()
		VMULPS(sr.vec, c.e2m1, t) // scaled table (exact)
		lo := ZMM()
		VPERMPS(t, d, lo) // lo[i] = t[d[i] & 15]: element 2i
		use(0, lo)
		VPSRLD(U8(4), d, d)
		hi := ZMM()
		VPERMPS(t, d, hi) // element 2i+1
		use(1, hi)
		return
	}
	cd := YMM()
	VBROADCASTI128(pm, cd)    // the 16 bytes in both lanes
	VPSRLVD(nibShift, cd, cd) // lane 1: high nibbles moved down
	VPAND(c.mLow, cd, cd)     // lane 0: codes of elements 2j, lane 1: 2j+1
	t1, t2 := YMM(), YMM()
	VBROADCASTI128(Mem{Base: c.stabs, Index: sr.off, Scale: 1}, t1)
	VPSHUFB(cd, t1, t1) // bf16 high bytes of the scaled weights
	VBROADCASTI128(Mem{Base: c.stabs, Index: sr.off, Scale: 1, Disp: 16}, t2)
	VPSHUFB(cd, t2, t2) // bf16 low bytes
	wa, wb := YMM(), YMM()
	VPUNPCKLBW(t1, t2, wa) // bf16 words: lane 0 elements 0,2,..,14; lane 1 1,3,..,15
	VPUNPCKHBW(t1, t2, wb) // elements 16..31 likewise
	for k, src := range []reg.VecVirtual{wa, wa, wb, wb} {
		f := YMM()
		if k%2 == 0 {
			VPSLLD(U8(16), src, f) // even words
		} else {
			VPAND(c.mHigh, src, f) // odd words
		}
		use(k, f)
	}
}

// rows computes dst[r] = Σ_c W[r][c]·x'[c] for MXFP4 rows (4 at a time),
// x' being x in the kernel's element order, and returns the number of rows
// done: rows, or the first row of the 4-row block in which a scale byte
// > 252 was met.
func rows(isa lib.ISA) {
	for t := 1; t <= lib.DirectT; t++ {
		R := 2 // rows per block: R·t accumulators
		switch {
		case t == 1:
			R = rowsMV
		case t > 4:
			R = 1
		}
		rowsVariant(isa, fmt.Sprintf("mxfp4RowsT%d%s", t, isa.Name), R, t)
	}
}

// rowsVariant emits the direct kernel for T tokens: each group of each row
// is decoded once in registers and multiplied with the T tokens' chunks
// (x packed as [chunk][T][L]), one accumulator per (row, token); results go
// to dst[t·dstStride/4 + r]. It returns the rows done: rows, or the first
// row of the block in which a scale byte > maxScale was met.
func rowsVariant(isa lib.ISA, name string, R, T int) {
	lib.Func(name, "func(dst *float32, dstStride int, packed *byte, pStride int, scales *byte, sStride int, rows, groups int, x *float32) int",
		fmt.Sprintf("%s is the MXFP4 kernel for %d token(s) (dstStride in bytes); it returns the rows done before a scale byte > %d.", name, T, maxScale),
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	packed := Load(Param("packed"), GP64())
	scales := Load(Param("scales"), GP64())
	pStride := Load(Param("pStride"), GP64())
	sStride := Load(Param("sStride"), GP64())
	done := GP64()
	XORQ(done, done)
	c := loadConstsR(isa, R*T)
	bail, finish := lb.New("bail"), lb.New("finish")
	B := isa.Bytes()
	cpg := chunksPerGroup(isa)

	body := func(r int) {
		accs := make([][]reg.VecVirtual, r)
		for i := range accs {
			accs[i] = make([]reg.VecVirtual, T)
			for j := range accs[i] {
				accs[i][j] = isa.Vec()
				VXORPS(accs[i][j], accs[i][j], accs[i][j])
			}
		}
		// One packed and one scale pointer per 4 rows.
		nb := (r + 3) / 4
		pps, sps := make([]reg.GPVirtual, nb), make([]reg.GPVirtual, nb)
		for b := range pps {
			pps[b], sps[b] = GP64(), GP64()
			if b == 0 {
				MOVQ(packed, pps[b])
				MOVQ(scales, sps[b])
			} else {
				LEAQ(Mem{Base: pps[b-1], Index: pStride, Scale: 4}, pps[b])
				LEAQ(Mem{Base: sps[b-1], Index: sStride, Scale: 4}, sps[b])
			}
		}
		xp := Load(Param("x"), GP64())
		g := Load(Param("groups"), GP64())
		loop, end := lb.New("g"), lb.New("gend")
		TESTQ(g, g)
		JZ(LabelRef(end))
		Label(loop)
		for i := 0; i < r; i++ {
			pp, sp := pps[i/4], sps[i/4]
			var pm, sm Mem
			switch i % 4 {
			case 0:
				pm, sm = Mem{Base: pp}, Mem{Base: sp}
			case 1, 2:
				pm, sm = Mem{Base: pp, Index: pStride, Scale: uint8(i % 4)}, Mem{Base: sp, Index: sStride, Scale: uint8(i % 4)}
			case 3:
				t := GP64()
				LEAQ(Mem{Base: pp, Index: pStride, Scale: 2}, t)
				pm = Mem{Base: t, Index: pStride, Scale: 1}
				u := GP64()
				LEAQ(Mem{Base: sp, Index: sStride, Scale: 2}, u)
				sm = Mem{Base: u, Index: sStride, Scale: 1}
			}
			sv := scale(isa, c, sm, bail)
			acc := accs[i]
			decode(isa, c, pm, sv, func(k int, w reg.VecVirtual) {
				for j := 0; j < T; j++ {
					VFMADD231PS(Mem{Base: xp, Disp: (k*T + j) * B}, w, acc[j])
				}
			})
		}
		for b := range pps {
			ADDQ(U8(16), pps[b])
			INCQ(sps[b])
		}
		ADDQ(U32(cpg*T*B), xp)
		DECQ(g)
		JNZ(LabelRef(loop))
		Label(end)
		dst := Load(Param("dst"), GP64())
		LEAQ(Mem{Base: dst, Index: done, Scale: 4}, dst)
		var ds reg.Register
		if T > 1 {
			ds = Load(Param("dstStride"), GP64())
		}
		for j := 0; j < T; j++ {
			if j > 0 {
				ADDQ(ds, dst)
			}
			col := make([]reg.VecVirtual, r)
			for i := range col {
				col[i] = accs[i][j]
			}
			isa.ReduceStore(col, dst)
		}
	}
	advance := func(r int) {
		ADDQ(U8(r), done)
		for k := 0; k < r; k++ {
			ADDQ(pStride, packed)
			ADDQ(sStride, scales)
		}
	}

	loop, edge := lb.New("rows"), lb.New("edge")
	Label(loop)
	left := Load(Param("rows"), GP64())
	SUBQ(done, left)
	CMPQ(left, U8(R))
	JL(LabelRef(edge))
	body(R)
	advance(R)
	JMP(LabelRef(loop))
	Label(edge)
	var labels []string
	for r := 1; r < R; r++ {
		l := lb.New(fmt.Sprintf("edge%d", r))
		labels = append(labels, l)
		CMPQ(left, U8(r))
		JE(LabelRef(l))
	}
	JMP(LabelRef(finish))
	for r := 1; r < R; r++ {
		Label(labels[r-1])
		body(r)
		advance(r)
		JMP(LabelRef(finish))
	}
	Label(bail)
	Label(finish)
	Store(done, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// tile decodes rows × groups of an MXFP4 matrix into the packed GEMM layout
// of the gemm generator (isa.GemmR-row blocks, blockStride bytes apart) and
// returns the number of rows decoded: rows, or the index of the first row
// with a scale byte > 252 (that row is partly written).
func tile(isa lib.ISA) {
	name := "mxfp4Tile" + isa.Name
	lib.Func(name, "func(tile *float32, blockStride int, packed *byte, pStride int, scales *byte, sStride int, rows, groups int) int",
		fmt.Sprintf("%s decodes MXFP4 rows into the packed GEMM layout; it returns the rows done before a scale byte > %d.", name, maxScale),
		"Requires: "+isa.Requires()+".")
	var lb lib.Labeler
	R, B := isa.GemmR, isa.Bytes()
	cpg := chunksPerGroup(isa)
	blk := Load(Param("tile"), GP64())
	packed := Load(Param("packed"), GP64())
	scales := Load(Param("scales"), GP64())
	done := GP64()
	XORQ(done, done)
	slot := GP64()
	XORQ(slot, slot)
	rowDst := GP64()
	MOVQ(blk, rowDst)
	c := loadConsts(isa)
	bail, finish := lb.New("bail"), lb.New("finish")

	rloop := lb.New("row")
	Label(rloop)
	rows := Load(Param("rows"), GP64())
	CMPQ(done, rows)
	JGE(LabelRef(finish))
	pp, sp, dp := GP64(), GP64(), GP64()
	MOVQ(packed, pp)
	MOVQ(scales, sp)
	MOVQ(rowDst, dp)
	g := Load(Param("groups"), GP64())
	gloop, gend := lb.New("g"), lb.New("gend")
	TESTQ(g, g)
	JZ(LabelRef(gend))
	Label(gloop)
	sv := scale(isa, c, Mem{Base: sp}, bail)
	decode(isa, c, Mem{Base: pp}, sv, func(k int, w reg.VecVirtual) {
		VMOVUPS(w, Mem{Base: dp, Disp: k * R * B})
	})
	ADDQ(U8(16), pp)
	INCQ(sp)
	ADDQ(U32(cpg*R*B), dp)
	DECQ(g)
	JNZ(LabelRef(gloop))
	Label(gend)
	// Next row.
	INCQ(done)
	ADDQ(Load(Param("pStride"), GP64()), packed)
	ADDQ(Load(Param("sStride"), GP64()), scales)
	INCQ(slot)
	ADDQ(U32(B), rowDst)
	CMPQ(slot, U8(R))
	JNE(LabelRef(rloop))
	XORQ(slot, slot)
	ADDQ(Load(Param("blockStride"), GP64()), blk)
	MOVQ(blk, rowDst)
	JMP(LabelRef(rloop))
	Label(bail)
	Label(finish)
	Store(done, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
