package quant_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// ExampleMatVec lays out a 2×64 MXFP4 matrix by hand and multiplies it in
// packed form. Each row is 32 bytes of 4-bit E2M1 codes, two per byte (the
// even element in the low nibble), plus one E8M0 scale byte per group of
// 32 elements; a scale byte s means 2^(s-127).
func ExampleMatVec() {
	const rows, cols = 2, 64
	m := quant.Matrix{
		Rows: rows,
		Cols: cols,
		Packed: bytes.Join([][]byte{
			bytes.Repeat([]byte{0x22}, cols/2), // row 0: codes 2, 2 = 1.0, 1.0
			bytes.Repeat([]byte{0xA4}, cols/2), // row 1: codes 4, 10 = 2.0, -1.0
		}, nil),
		Scales: []byte{
			127, 128, // row 0: group 0 ×1, group 1 ×2
			126, quant.SkipScale, // row 1: group 0 ×0.5, group 1 contributes nothing
		},
	}
	if err := m.Check(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(m.Packed)+len(m.Scales) == quant.Bytes(rows, cols))

	// The values the codes stand for (for inspection only).
	row := make([]float32, cols)
	m.DequantizeRow(row, 1)
	fmt.Println(row[:4], row[32:34])

	// The product decodes the codes in registers, never in memory.
	x := make([]float32, cols)
	for i := range x {
		x[i] = 1
	}
	y := make([]float32, rows) // nil Runner: serial, on this goroutine
	quant.MatVec(nil, y, m, x)
	fmt.Println(y)
	// Output:
	// true
	// [1 -0.5 1 -0.5] [0 0]
	// [96 8]
}

// ExampleLinear builds an MXFP4 matrix from its two stored tensors, as a
// checkpoint holds them (weight_packed U8 [rows, cols/2] and weight_scale
// U8 [rows, cols/32]), and runs it as a Linear layer on two tokens.
func ExampleLinear() {
	packed := tensor.Tensor{
		DType: tensor.U8,
		Shape: []int{1, 16},
		Data:  bytes.Repeat([]byte{0x02}, 16), // codes 2, 0: weights 1, 0, 1, 0, ...
	}
	scale := tensor.Tensor{DType: tensor.U8, Shape: []int{1, 1}, Data: []byte{127}}
	mx, err := quant.FromTensors(packed, scale)
	if err != nil {
		log.Fatal(err)
	}
	lin := quant.Linear{MX: mx, IsMX: true}
	fmt.Println(lin.String(), lin.Rows(), lin.Cols())

	// Two tokens, stored one after the other: all ones, then 0, 1, ..., 31.
	x := make([]float32, 2*lin.Cols())
	for c := range lin.Cols() {
		x[c] = 1
		x[lin.Cols()+c] = float32(c)
	}
	dst := make([]float32, 2*lin.Rows())
	lin.MatMul(nil, dst, x, 2)
	fmt.Println(dst) // the sums of the even-indexed inputs
	// Output:
	// MXFP4[1,32] 1 32
	// [16 240]
}
