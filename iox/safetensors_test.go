package iox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/tensor"
)

// TestFixtureShards reads the awkward safetensors cases: every name
// round-trips, values come back bit for bit, absent names are absent.
func TestFixtureShards(t *testing.T) {
	dir := fixtures.Path(t, "st")
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	want := map[string]struct {
		dt    tensor.DType
		shape []int
		shard int
	}{
		"plain.f32.2d":  {tensor.F32, []int{16, 16}, 0},
		"plain.bf16.1d": {tensor.BF16, []int{128}, 0},
		"tricky.f16.1d": {tensor.F16, []int{64}, 0},
		"packed.u8.2d":  {tensor.U8, []int{7, 32}, 0},
		"scalar.f32":    {tensor.F32, []int{}, 0},
		"empty.f32":     {tensor.F32, []int{0, 8}, 0},
		"language_model.model.layers.0.block_sparse_moe.experts.0.w1.weight_packed": {tensor.U8, []int{2, 32}, 0},
		"language_model.model.layers.0.block_sparse_moe.experts.1.w1.weight_packed": {tensor.U8, []int{2, 32}, 0},
		"rank3.f32":               {tensor.F32, []int{2, 3, 4}, 0},
		"rank4.u8":                {tensor.U8, []int{2, 2, 2, 2}, 0},
		"second.shard.f32":        {tensor.F32, []int{10, 10}, 1},
		"second.shard.u8":         {tensor.U8, []int{300}, 1},
		`weird\name."with"quotes`: {tensor.F32, []int{3}, 1},
	}
	if ck.Len() != len(want) {
		t.Errorf("indexed %d tensors, want %d (is __metadata__ indexed?): %v", ck.Len(), len(want), ck.Names())
	}
	for name, w := range want {
		e, ok := ck.Lookup(name)
		if !ok {
			t.Errorf("%q not found", name)
			continue
		}
		if e.DType != w.dt || len(e.Shape) != len(w.shape) || e.Shard != w.shard {
			t.Errorf("%q: %s %v shard %d, want %s %v shard %d", name, e.DType, e.Shape, e.Shard, w.dt, w.shape, w.shard)
		}
		for i := range w.shape {
			if e.Shape[i] != w.shape[i] {
				t.Errorf("%q: shape %v, want %v", name, e.Shape, w.shape)
			}
		}
		tt, err := ck.Read(name)
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if err := tt.Check(); err != nil {
			t.Errorf("%q: %v", name, err)
		}
		// Compare with the raw bytes at the header's offset.
		raw, err := os.ReadFile(filepath.Join(dir, ck.Shards[e.Shard].Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tt.Data, raw[e.Offset:e.Offset+e.Size]) {
			t.Errorf("%q: bytes differ from the file", name)
		}
	}
	if _, ok := ck.Lookup("__metadata__"); ok {
		t.Error("__metadata__ indexed as a tensor")
	}
	if _, err := ck.Read("no.such.tensor"); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent tensor: got %v, want ErrNotFound", err)
	}
	// Special values survive widening bit for bit.
	bf, _ := ck.Read("plain.bf16.1d")
	vals, err := tensor.WidenTensor(bf)
	if err != nil {
		t.Fatal(err)
	}
	var sawInf, sawNaN, sawNegZero bool
	for i, v := range vals {
		bits := binary.LittleEndian.Uint16(bf.Data[2*i:])
		if math.Float32bits(v) != uint32(bits)<<16 {
			t.Fatalf("bf16 element %d: %#x widened to %#x", i, bits, math.Float32bits(v))
		}
		sawInf = sawInf || math.IsInf(float64(v), 0)
		sawNaN = sawNaN || v != v
		sawNegZero = sawNegZero || (v == 0 && math.Signbit(float64(v)))
	}
	if !sawInf || !sawNaN || !sawNegZero {
		t.Errorf("bf16 fixture special values not seen: inf %v NaN %v -0 %v", sawInf, sawNaN, sawNegZero)
	}
	f16, _ := ck.Read("tricky.f16.1d")
	if _, err := tensor.WidenTensor(f16); err != nil {
		t.Fatal(err)
	}
}

// header builds a safetensors file from a JSON header and data.
func header(js string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(js)))
	b.WriteString(js)
	b.Write(data)
	return b.Bytes()
}

func TestRejectBadFiles(t *testing.T) {
	cases := map[string][]byte{
		"truncated length":    {1, 2, 3},
		"header past EOF":     header(`{}`, nil)[:6],
		"huge header length":  append(binary.LittleEndian.AppendUint64(nil, 1<<60), []byte("{}")...),
		"not JSON":            header(`{"a": `, nil),
		"not an object":       header(`[1,2]`, nil),
		"unknown dtype":       header(`{"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}}`, make([]byte, 2)),
		"size mismatch":       header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 8)),
		"past end":            header(`{"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, make([]byte, 8)),
		"overlap":             header(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, make([]byte, 16)),
		"reversed offsets":    header(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}}`, make([]byte, 16)),
		"negative dim":        header(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil),
		"duplicate name":      header(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)),
		"missing offsets":     header(`{"a":{"dtype":"U8","shape":[1]}}`, make([]byte, 1)),
		"overflowing shape":   header(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}`, make([]byte, 4)),
		"trailing garbage":    header(`{} {}`, nil),
		"metadata not string": header(`{"__metadata__":{"a":1}}`, nil),
	}
	for name, file := range cases {
		_, err := ReadHeader(bytes.NewReader(file), int64(len(file)), name)
		if !errors.Is(err, ErrFormat) && !(err != nil && strings.Contains(name, "truncated")) {
			t.Errorf("%s: got %v, want ErrFormat", name, err)
		}
	}
}

func TestCheckpointErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("empty dir: got %v", err)
	}
	good := header(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4})
	os.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), good, 0o644)
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`), 0o644)
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "model-00002-of-00002") {
		t.Errorf("missing shard: got %v", err)
	}
	os.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), good, 0o644)
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("tensor in two shards: got %v", err)
	}
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"../x.safetensors"}}`), 0o644)
	if _, err := OpenCheckpoint(dir); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("path in index: got %v", err)
	}
	// A file truncated after its header was written: the data section is
	// shorter than the header claims.
	d2 := t.TempDir()
	os.WriteFile(filepath.Join(d2, "model.safetensors"), good[:len(good)-2], 0o644)
	if _, err := OpenCheckpoint(d2); !errors.Is(err, ErrFormat) {
		t.Errorf("truncated shard: got %v", err)
	}
}
