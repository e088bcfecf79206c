package iox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// headerSeeds are headers in and out of the scanner's subset: what
// writers produce, and escapes, fractions, odd keys, duplicates, nulls,
// trailing data, bad syntax.
var headerSeeds = []string{
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
	`{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`,
	`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}`,
	` { "a" : { "data_offsets" : [ 0 , 4 ] , "shape" : [ 4 ] , "dtype" : "U8" } } `,
	`{}`, `{ }`, `{}]`, `{} x`, `[]`, `{"a":1}`, `{"a":{}}`, `{"a":null}`,
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],}}`,
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},}`,
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}`,
	`{"a":{"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]}}`,
	`{"a":{"DType":"U8","shape":[4],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"extra":1}}`,
	`{"a":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[4e0],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[04],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}`,
	`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,99999999999999999999]}}`,
	`{"a":{"dtype":"U8","shape":null,"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`,
	`{"a":{"dtype":"X9","shape":[1],"data_offsets":[0,1]}}`,
	`{"a\"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
	`{"a\u0062":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
	"{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
	"{\"é\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
	`{"__metadata__":null,"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
	`{"__metadata__":{"k":1}}`, `{"__metadata__":{"k":"v","k":"w"}}`, `{"__metadata__":{}}`,
	`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
	`{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}`,
	`{"a":{"dtype":"F64","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}}`,
}

// sameHeader checks that ParseHeader gives decodeHeader's verdict and
// result on js (decodeHeader's tensors then go through the same overlap
// check), and that the scanner, when it accepts js, agrees with
// decodeHeader tensor for tensor.
func sameHeader(t *testing.T, js []byte, dataSize int64) {
	t.Helper()
	got, gotErr := ParseHeader(js, dataSize)
	fast, ok := scanHeader(js, dataSize)
	slow, slowErr := decodeHeader(js, dataSize)
	if ok {
		if slowErr != nil {
			t.Fatalf("%q: the scanner accepts what encoding/json refuses: %v", js, slowErr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: scanned %+v, decoded %+v", js, fast, slow)
		}
	}
	if slowErr != nil {
		if gotErr == nil || gotErr.Error() != slowErr.Error() {
			t.Fatalf("%q: ParseHeader error %v, want %v", js, gotErr, slowErr)
		}
		return
	}
	if gotErr == nil && !ok && !reflect.DeepEqual(got.Metadata, slow.Metadata) {
		t.Fatalf("%q: metadata %v, want %v", js, got.Metadata, slow.Metadata)
	}
	if gotErr != nil && !errors.Is(gotErr, ErrFormat) {
		t.Fatalf("%q: error does not wrap ErrFormat: %v", js, gotErr)
	}
}

// TestScanHeaderSeeds runs the seeds through both parsers, and the
// fixtures' awkward shards (an escaped, quoted name; F16; rank 4;
// __metadata__) and a synthetic shard through the scanner: those it
// must read itself.
func TestScanHeaderSeeds(t *testing.T) {
	for _, js := range headerSeeds {
		sameHeader(t, []byte(js), 4)
		sameHeader(t, []byte(js), 1<<20)
	}
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		raw, err := os.ReadFile(filepath.Join(fixtures.Path(t, "st"), name))
		if err != nil {
			t.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(raw)
		js, dataSize := raw[8:8+n], int64(len(raw))-8-int64(n)
		sameHeader(t, js, dataSize)
		if h, ok := scanHeader(js, dataSize); name == "model-00002-of-00002.safetensors" && ok {
			t.Fatalf("%s: the scanner read a name with escapes itself: %+v", name, h.Tensors)
		}
	}
	js := `{"__metadata__":{"format":"pt"},"language_model.model.layers.1.self_attn.A_log":{"dtype":"F32","shape":[128],"data_offsets":[0,512]},` +
		`"language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed":{"dtype":"U8","shape":[3072,1792],"data_offsets":[512,5505536]}}`
	if _, ok := scanHeader([]byte(js), 5505536); !ok {
		t.Fatalf("the scanner does not read a writer's plain header")
	}
}

// FuzzParseHeader: ParseHeader never panics, its errors wrap ErrFormat,
// an accepted header's ranges lie inside the data and do not overlap, and
// the scanner agrees with encoding/json on every header it accepts.
func FuzzParseHeader(f *testing.F) {
	for _, s := range headerSeeds {
		f.Add([]byte(s), int64(4))
	}
	f.Fuzz(func(t *testing.T, js []byte, dataSize int64) {
		if dataSize < 0 {
			dataSize = -dataSize
		}
		sameHeader(t, js, dataSize)
		h, err := ParseHeader(js, dataSize)
		if err != nil {
			return
		}
		var end int64
		for _, ti := range h.Tensors {
			if ti.Offset < 0 || ti.Size < 0 || ti.Offset+ti.Size > dataSize {
				t.Fatalf("tensor %q [%d,+%d) outside %d", ti.Name, ti.Offset, ti.Size, dataSize)
			}
			if ti.Size > 0 {
				if ti.Offset < end {
					t.Fatalf("overlap accepted at %q", ti.Name)
				}
				end = ti.Offset + ti.Size
			}
		}
	})
}

var indexSeeds = []string{
	`{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors"}}`,
	`{"metadata":{"total_size":123,"x":[1,2.5e-3,-0.0,true,false,null,{"y":"z"}]},"weight_map":{"a":"s.safetensors","b":"t.safetensors"}}`,
	`{"weight_map":{"a":"../evil.safetensors"}}`,
	`{"weight_map":{}}`, `{"weight_map":null}`, `{}`, `[]`, `{"weight_map":{"a":"s.safetensors"}} x`,
	`{"weight_map":{"a":"s.safetensors","a":"t.safetensors"}}`,
	`{"weight_map":{"a":"s.safetensors"},"weight_map":{"b":"t.safetensors"}}`,
	`{"Weight_Map":{"a":"s.safetensors"}}`,
	`{"weight_map":{"a":"s.safetensors"},"metadata":{"n":01}}`,
	`{"weight_map":{"a":"s.safetensors"},"metadata":{"n":1.}}`,
	`{"weight_map":{"a\u0041":"s.safetensors"}}`,
	`{"weight_map":{"a":"s.safetensors",}}`,
	`{"weight_map":{"a":1}}`,
}

// entriesOf returns encoding/json's reading of an index, by name.
func entriesOf(data []byte) ([]indexEntry, error) {
	x, err := parseIndex(data, "index.json")
	if err != nil {
		return nil, err
	}
	return x.entries(), nil
}

// FuzzParseIndex: the index reader never panics, its errors wrap
// ErrCheckpoint, no shard name it accepts leaves the directory, and the
// scanner's entries, when it reads an index, hold encoding/json's: the same
// names, each name's last shard the decoded one.
func FuzzParseIndex(f *testing.F) {
	for _, s := range indexSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := entriesOf(data)
		if werr != nil && !errors.Is(werr, ErrCheckpoint) {
			t.Fatalf("error does not wrap ErrCheckpoint: %v", werr)
		}
		for _, e := range want {
			if strings.ContainsAny(e.shard, `/\`) || !strings.HasSuffix(e.shard, ".safetensors") {
				t.Fatalf("tensor %q maps to unsafe shard name %q", e.tensor, e.shard)
			}
		}
		es, ok := scanIndex(data)
		if !ok {
			return
		}
		// encoding/json reports a bad shard name, the scanner leaves
		// that to the check; any other refusal is a disagreement.
		if werr != nil && !strings.Contains(werr.Error(), "bad shard name") {
			t.Fatalf("%q: the scanner reads what encoding/json refuses: %v", data, werr)
		}
		last := map[string]string{}
		for _, e := range es {
			last[e.tensor] = e.shard
		}
		if werr == nil {
			if len(last) != len(want) {
				t.Fatalf("%q: scanned %d names, decoded %d", data, len(last), len(want))
			}
			for _, e := range want {
				if last[e.tensor] != e.shard {
					t.Fatalf("%q: %q in %q scanned, %q decoded", data, e.tensor, last[e.tensor], e.shard)
				}
			}
		}
	})
}

// TestIndexSeeds runs the index seeds, and checks that an index listing a
// tensor twice is judged by its last entry, as encoding/json reads it.
func TestIndexSeeds(t *testing.T) {
	for i, s := range indexSeeds {
		x, err := loadIndex([]byte(s), "index.json")
		if err == nil {
			err = x.check(func(es []indexEntry) error {
				for _, e := range es {
					if err := checkShardName(e, "index.json"); err != nil {
						return err
					}
				}
				return nil
			})
		}
		_, werr := entriesOf([]byte(s))
		if (err == nil) != (werr == nil) {
			t.Errorf("%s: loadIndex and its check %v, parseIndex %v", s, err, werr)
		}
		if i < 2 && (x == nil || x.decoded) {
			t.Errorf("%s: not read by the scanner", s)
		}
	}
	x, err := loadIndex([]byte(`{"weight_map":{"a":"s.safetensors","a":"t.safetensors"}}`), "index.json")
	if err != nil {
		t.Fatal(err)
	}
	var saw []indexEntry
	err = x.check(func(es []indexEntry) error {
		saw = es
		for _, e := range es {
			if e.shard != "t.safetensors" {
				return errors.New("not in t")
			}
		}
		return nil
	})
	if err != nil || len(saw) != 1 {
		t.Fatalf("a name listed twice: %v, checked %v; want the last entry only", err, saw)
	}
}

// layerHeader is the JSON header of one MoE layer's shard of the released
// layout: its vectors, matrices and 896 experts of six U8 tensors, 5,404
// tensors in all, about 800 KB.
func layerHeader() ([]byte, int64) {
	var b strings.Builder
	b.WriteString(`{`)
	var off int64
	add := func(name, dtype string, shape []int64, esize int64) {
		n := esize
		var dims []string
		for _, d := range shape {
			n *= d
			dims = append(dims, strconv.FormatInt(d, 10))
		}
		if off > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"language_model.model.layers.1.%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}`, name, dtype, strings.Join(dims, ","), off, off+n)
		off += n
	}
	for i := 0; i < 28; i++ {
		add(fmt.Sprintf("self_attn.vec_%d.weight", i), "F32", []int64{12288}, 4)
	}
	for i := 0; i < 12; i++ {
		add(fmt.Sprintf("self_attn.mat_%d.weight", i), "BF16", []int64{12288, 7168}, 2)
	}
	for e := 0; e < 896; e++ {
		for w := 1; w <= 3; w++ {
			p := fmt.Sprintf("block_sparse_moe.experts.%d.w%d.", e, w)
			add(p+"weight_packed", "U8", []int64{3072, 1792}, 1)
			add(p+"weight_scale", "U8", []int64{3072, 112}, 1)
		}
	}
	b.WriteString(`}`)
	return []byte(b.String()), off
}

// BenchmarkParseHeader parses one layer's header with encoding/json (the
// reader before the scanner, still the fallback) and with ParseHeader
// (the scanner), in one process:
//
//	go test ./iox -run '^$' -bench ParseHeader -count 3
func BenchmarkParseHeader(b *testing.B) {
	js, size := layerHeader()
	if _, ok := scanHeader(js, size); !ok {
		b.Fatal("the scanner does not read the layer's header")
	}
	for _, c := range []struct {
		name  string
		parse func([]byte, int64) (*Header, error)
	}{{"encoding_json", decodeHeader}, {"scanner", ParseHeader}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(js)))
			for b.Loop() {
				if _, err := c.parse(js, size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
