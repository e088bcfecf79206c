package k3_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// copyDir copies a fixture checkpoint into a fresh temp dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "expected.json" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// editHeader rewrites a shard's JSON header with edit, keeping the data.
func editHeader(t *testing.T, path string, edit func(h map[string]map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	h := map[string]map[string]any{}
	for k, v := range raw {
		if k == "__metadata__" {
			continue
		}
		var m map[string]any
		json.Unmarshal(v, &m)
		h[k] = m
	}
	edit(h)
	js, _ := json.Marshal(h)
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, uint64(len(js)))
	out.Write(js)
	out.Write(b[8+n:])
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func setF32(t *testing.T, path string, off int64, v float32) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// tensorOffset returns the absolute file offset of a tensor's data.
func tensorOffset(t *testing.T, path, name string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var nb [8]byte
	io.ReadFull(f, nb[:])
	n := binary.LittleEndian.Uint64(nb[:])
	js := make([]byte, n)
	io.ReadFull(f, js)
	var h map[string]struct {
		Offsets []int64 `json:"data_offsets"`
	}
	json.Unmarshal(js, &h)
	e, ok := h[name]
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return 8 + int64(n) + e.Offsets[0]
}

// TestAdversarialCheckpoints opens damaged copies of the oracle: each is
// refused at Open with ErrBadCheckpoint or ErrBadConfig and a message that
// names the problem, never a panic.
func TestAdversarialCheckpoints(t *testing.T) {
	mx := fixtures.Path(t, "oracle/tiny-mxfp4")
	f32 := fixtures.Path(t, "oracle/tiny-f32")
	const shard = "model.safetensors"
	cases := []struct {
		name string
		src  string
		bad  func(t *testing.T, dir string)
		want error
		msg  string
	}{
		{"truncated shard", mx, func(t *testing.T, dir string) {
			p := filepath.Join(dir, shard)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-1000)
		}, k3.ErrBadCheckpoint, "past the"},
		{"header length past end", mx, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, shard), binary.LittleEndian.AppendUint64(nil, 1<<40), 0o644)
		}, k3.ErrBadCheckpoint, "header length"},
		{"overlapping tensors", mx, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, shard), func(h map[string]map[string]any) {
				a := h["language_model.model.norm.weight"]["data_offsets"].([]any)
				b := h["language_model.model.output_attn_res_norm.weight"]
				b["data_offsets"] = []any{a[0], a[1]}
			})
		}, k3.ErrBadCheckpoint, "overlaps"},
		{"shape disagrees with bytes", mx, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, shard), func(h map[string]map[string]any) {
				h["language_model.model.norm.weight"]["shape"] = []any{64}
			})
		}, k3.ErrBadCheckpoint, "needs"},
		{"unknown dtype", mx, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, shard), func(h map[string]map[string]any) {
				h["language_model.model.norm.weight"]["dtype"] = "Q3"
			})
		}, k3.ErrBadCheckpoint, "Q3"},
		{"missing tensor", mx, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, shard), func(h map[string]map[string]any) {
				h["renamed"] = h["language_model.model.layers.5.self_attn.q_proj.weight"]
				delete(h, "language_model.model.layers.5.self_attn.q_proj.weight")
			})
		}, k3.ErrBadCheckpoint, "layers.5.self_attn.q_proj.weight is missing"},
		{"missing expert", mx, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, shard), func(h map[string]map[string]any) {
				h["renamed"] = h["language_model.model.layers.7.block_sparse_moe.experts.3.w2.weight_scale"]
				delete(h, "language_model.model.layers.7.block_sparse_moe.experts.3.w2.weight_scale")
			})
		}, k3.ErrBadCheckpoint, "experts.3.w2.weight_scale is missing"},
		{"wrong dtype", mx, func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, shard), func(h map[string]map[string]any) {
				e := h["language_model.model.layers.2.self_attn.q_proj.weight"]
				e["dtype"], e["shape"] = "U8", []any{64, 256}
			})
		}, k3.ErrBadCheckpoint, "dtype U8"},
		{"config disagrees with tensors", mx, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"kv_lora_rank": 32`), []byte(`"kv_lora_rank": 48`), 1), 0o644)
		}, k3.ErrBadCheckpoint, "kv_a_proj_with_mqa.weight has shape"},
		{"NaN in a vector", mx, func(t *testing.T, dir string) {
			p := filepath.Join(dir, shard)
			setF32(t, p, tensorOffset(t, p, "language_model.model.layers.4.post_attention_layernorm.weight")+8, float32(math.NaN()))
		}, k3.ErrBadCheckpoint, "non-finite"},
		{"missing shard", f32, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, k3.ErrBadCheckpoint, "model-00002-of-00002.safetensors"},
		{"shards swapped", f32, func(t *testing.T, dir string) {
			a, b := filepath.Join(dir, "model-00001-of-00002.safetensors"), filepath.Join(dir, "model-00002-of-00002.safetensors")
			os.Rename(a, a+".x")
			os.Rename(b, a)
			os.Rename(a+".x", b)
		}, k3.ErrBadCheckpoint, "index"},
		{"bad config", mx, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"hidden_size": "big"}`), 0o644)
		}, k3.ErrBadConfig, "hidden_size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, c.src)
			c.bad(t, dir)
			m, err := k3.Open(dir, k3.Options{})
			if err == nil {
				m.Close()
				t.Fatal("damaged checkpoint accepted")
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v; want %v mentioning %q", err, c.want, c.msg)
			}
		})
	}
}

// TestNaNWeightsRefused puts a NaN into a matrix the loader does not scan:
// the step fails with ErrNonFinite instead of returning garbage.
func TestNaNWeightsRefused(t *testing.T) {
	dir := copyDir(t, fixtures.Path(t, "oracle/tiny-f32"))
	p := filepath.Join(dir, "model-00002-of-00002.safetensors")
	setF32(t, p, tensorOffset(t, p, "language_model.lm_head.weight")+4*128*7, float32(math.NaN()))
	m, err := k3.Open(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.NewSession().Step(context.Background(), []int{1, 2, 3}); !errors.Is(err, k3.ErrNonFinite) {
		t.Fatalf("got %v, want ErrNonFinite", err)
	}
}

// TestFileChangedWhileRunning truncates, then replaces, a shard under a
// model that streams: the next step fails with a clear error, and Close
// still works.
func TestFileChangedWhileRunning(t *testing.T) {
	for _, how := range []string{"truncated", "replaced", "modified"} {
		t.Run(how, func(t *testing.T) {
			dir := copyDir(t, fixtures.Path(t, "oracle/tiny-mxfp4"))
			m, err := k3.Open(dir, k3.Options{RAMBudget: 56e6, MaxContext: 64})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			s := m.NewSession()
			if _, err := s.Step(ctx, []int{1, 2}); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "model.safetensors")
			switch how {
			case "truncated":
				st, _ := os.Stat(p)
				os.Truncate(p, st.Size()/2)
			case "replaced":
				b, _ := os.ReadFile(p)
				os.WriteFile(p+".new", b, 0o644)
				os.Rename(p+".new", p)
				// Paths are checked at most once a second (the open
				// descriptor keeps reading the old, consistent bytes).
				time.Sleep(1100 * time.Millisecond)
			case "modified":
				f, _ := os.OpenFile(p, os.O_RDWR, 0)
				f.WriteAt([]byte{1}, 100000)
				f.Close()
				later := nowPlusSecond()
				os.Chtimes(p, later, later)
			}
			_, err = s.Step(ctx, []int{3})
			if !errors.Is(err, k3.ErrBadCheckpoint) {
				t.Fatalf("after the shard was %s: got %v, want ErrBadCheckpoint", how, err)
			}
			if _, err := m.NewSession().Step(ctx, []int{1}); !errors.Is(err, k3.ErrBadCheckpoint) {
				t.Fatalf("a new session after the shard was %s: %v", how, err)
			}
			if err := m.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

func nowPlusSecond() time.Time { return time.Now().Add(time.Second) }
