package iox_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/tensor"
)

// writeExampleShard writes a tiny safetensors file into a new temporary
// directory, which the caller removes: the header's length as 8
// little-endian bytes, the JSON header, then the data section, to which
// data_offsets are relative.
func writeExampleShard() (dir string) {
	dir, err := os.MkdirTemp("", "iox-example")
	if err != nil {
		log.Fatal(err)
	}
	header := `{"bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for _, v := range []float32{0.5, -2} { // bias
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	for _, v := range []float32{1, 2, 3, 4} { // weight
		b = binary.LittleEndian.AppendUint16(b, tensor.F32ToBF16(v))
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
		os.RemoveAll(dir)
		log.Fatal(err)
	}
	return dir
}

// ExampleOpenCheckpoint indexes a directory of safetensors files, finds a
// tensor and reads it.
func ExampleOpenCheckpoint() {
	dir := writeExampleShard()
	defer os.RemoveAll(dir)

	ck, err := iox.OpenCheckpoint(dir) // reads and checks the headers only
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	fmt.Println(ck.Len(), ck.Names())

	e, ok := ck.Lookup("weight") // where the bytes are, without reading them
	fmt.Println(ok, ck.Shards[e.Shard].Name, e.DType, e.Shape, e.Size)

	t, err := ck.Read("weight") // small tensors only: it allocates
	if err != nil {
		log.Fatal(err)
	}
	m, _ := t.AsMat()
	row := make([]float32, m.Cols)
	m.Row(row, 1)
	fmt.Println(row)
	// Output:
	// 2 [bias weight]
	// true model.safetensors BF16 [2 2] 8
	// [3 4]
}

// ExampleReader reads one tensor's bytes the way the engine reads large
// ones: into a buffer aligned for O_DIRECT, through a Reader. The read
// covers the aligned window around the payload, which lands at
// Dst[off%Align:].
func ExampleReader() {
	dir := writeExampleShard()
	defer os.RemoveAll(dir)
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	e, _ := ck.Lookup("bias")

	// Direct bypasses the page cache where the file system allows it, and
	// falls back to buffered reads elsewhere; the result is the same.
	f, err := iox.OpenFile(ck.Shards[e.Shard].Path, iox.FileOptions{Direct: true})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	buf, err := iox.AllocAligned(iox.WindowLen(e.Offset, int(e.Size)), iox.BufferOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free() // after the Reader is closed: no read may target it then
	r, err := iox.NewReader(iox.ReaderOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	req := iox.Request{Src: f, Off: e.Offset, Len: int(e.Size), Dst: buf.Bytes()}
	p, err := r.Submit(context.Background(), req).Wait()
	if err != nil {
		log.Fatal(err)
	}
	bias := make([]float32, 2)
	if err := tensor.Widen(bias, p, e.DType); err != nil {
		log.Fatal(err)
	}
	fmt.Println(iox.IsAligned(buf.Bytes()), bias)
	// Output:
	// true [0.5 -2]
}

// ExampleWindow shows where a payload lands in a read buffer: O_DIRECT
// reads whole aligned blocks, so the payload [off, off+n) is read as the
// window [start, start+length) and sits at buf[pad:pad+n].
func ExampleWindow() {
	start, length, pad := iox.Window(5000, 100)
	fmt.Println(start, length, pad)

	// A payload that crosses a block boundary needs two blocks.
	start, length, pad = iox.Window(4000, 200)
	fmt.Println(start, length, pad, iox.WindowLen(4000, 200))
	// Output:
	// 4096 4096 904
	// 0 8192 4000 8192
}
