package tensor_test

import (
	"encoding/binary"
	"fmt"
	"log"

	"github.com/k3go/k3/tensor"
)

// bf16Bytes stores values as little-endian bfloat16, the layout of a BF16
// tensor in a checkpoint file.
func bf16Bytes(values ...float32) []byte {
	var b []byte
	for _, v := range values {
		b = binary.LittleEndian.AppendUint16(b, tensor.F32ToBF16(v))
	}
	return b
}

// ExampleMatVec views raw BF16 bytes as a 2×3 matrix, without converting
// them, and multiplies it by a vector. A nil Runner runs on the calling
// goroutine.
func ExampleMatVec() {
	// A stored tensor is a dtype, a shape and its raw bytes, row-major.
	t := tensor.Tensor{
		DType: tensor.BF16,
		Shape: []int{2, 3},
		Data:  bf16Bytes(1, 2, 3, -1, 0.5, 0),
	}
	w, err := t.AsMat() // checks the rank, dtype and byte count
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Rows, w.Cols, w.RowBytes())

	x := []float32{1, 2, 4}
	y := make([]float32, w.Rows) // len(y) must be Rows, len(x) Cols
	tensor.MatVec(nil, y, w, x)
	fmt.Println(y)
	// Output:
	// 2 3 6
	// [17 0]
}

// ExampleMatMul multiplies one matrix by several token vectors in one pass
// over the weights. Inputs and outputs are stored token after token.
func ExampleMatMul() {
	w := tensor.Mat{DType: tensor.BF16, Rows: 2, Cols: 2, Data: bf16Bytes(
		1, 1, // row 0 sums the inputs
		1, -1, // row 1 subtracts them
	)}
	x := []float32{
		3, 1, // token 0
		0.5, 2, // token 1
		-4, -4, // token 2
	}
	const tokens = 3
	dst := make([]float32, tokens*w.Rows)
	tensor.MatMul(nil, dst, w, x, tokens)
	for t := range tokens {
		fmt.Println(dst[t*w.Rows : (t+1)*w.Rows])
	}
	// Output:
	// [4 2]
	// [2.5 -1.5]
	// [-8 0]
}

// ExampleWiden converts stored BF16 elements to float32, and shows that
// narrowing to BF16 rounds: it keeps only 8 significant bits.
func ExampleWiden() {
	// 0x3F80 is 1.0 and 0xC0A0 is -5.0; bytes are little-endian.
	src := []byte{0x80, 0x3F, 0xA0, 0xC0, 0xC0, 0x3F}
	dst := make([]float32, 3) // src must hold exactly len(dst) elements
	if err := tensor.Widen(dst, src, tensor.BF16); err != nil {
		log.Fatal(err)
	}
	fmt.Println(dst)

	// One element at a time: widening is exact.
	fmt.Println(tensor.BF16ToF32(0x3FC0))

	// 3.14159 does not fit in 8 significant bits; it rounds to the nearest
	// BF16.
	b := tensor.F32ToBF16(3.14159)
	fmt.Printf("%#04x %v\n", b, tensor.BF16ToF32(b))
	// Output:
	// [1 -5 1.5]
	// 1.5
	// 0x4049 3.140625
}
