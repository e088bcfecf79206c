package k3_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// patchBytes overwrites bytes of a file at off.
func patchBytes(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// within runs f and fails the test if it does not return in time: a
// failed step must never leave a lock held.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s hangs", what)
		panic("unreachable")
	}
}

// stepLogits runs one step of a fresh session, closes it and returns a
// copy of its logits.
func stepLogits(t *testing.T, m *k3.Model, tokens []int) ([]float32, error) {
	t.Helper()
	type result struct {
		l   []float32
		err error
	}
	r := within(t, "a step", func() result {
		s := m.NewSession()
		defer s.Close()
		l, err := s.Step(context.Background(), tokens)
		return result{append([]float32(nil), l...), err}
	})
	return r.l, r.err
}

// nanCases names one matrix of each class of the oracle checkpoint and
// the op the error must name; each is patched to hold a non-finite value.
var nanCases = []struct {
	class, tensor, op string
	patch             func(t *testing.T, path string, off int64)
}{
	{"embedding", "language_model.model.embed_tokens.weight", "embedding row of token 1", bf16NaN(128 * 1)},
	{"KDA q_proj", "language_model.model.layers.0.self_attn.q_proj.weight", "layer 0: non-finite values: KDA attention", bf16NaN(5)},
	{"MLA q_b_proj", "language_model.model.layers.3.self_attn.q_b_proj.weight", "layer 3: non-finite values: MLA attention", bf16NaN(5)},
	{"MLP down_proj", "language_model.model.layers.0.mlp.down_proj.weight", "layer 0: non-finite values: dense MLP", bf16NaN(5)},
	{"router", "language_model.model.layers.1.block_sparse_moe.gate.weight", "layer 1: non-finite values: router", f32NaN(3)},
	{"shared experts", "language_model.model.layers.1.block_sparse_moe.shared_experts.down_proj.weight", "layer 1: non-finite values: shared experts", bf16NaN(5)},
	{"routed experts", "", "layer 1: non-finite values: routed expert", nil},
	{"latent up", "language_model.model.layers.1.block_sparse_moe.routed_expert_up_proj.weight", "layer 1: non-finite values: MoE", bf16NaN(5)},
	{"lm_head", "language_model.lm_head.weight", "lm_head", bf16NaN(7)},
}

func bf16NaN(i int64) func(t *testing.T, path string, off int64) {
	return func(t *testing.T, path string, off int64) { patchBytes(t, path, off+2*i, []byte{0xC0, 0x7F}) }
}

func f32NaN(i int64) func(t *testing.T, path string, off int64) {
	return func(t *testing.T, path string, off int64) { setF32(t, path, off+4*i, float32(math.NaN())) }
}

// overflowExperts makes every routed expert of layer 1 overflow float32:
// all scales 2^127 and all elements 6 (MXFP4 has no NaN code).
func overflowExperts(t *testing.T, path string) {
	for e := 0; e < 8; e++ {
		name := "language_model.model.layers.1.block_sparse_moe.experts." + string(rune('0'+e)) + ".w2.weight_"
		patchBytes(t, path, tensorOffset(t, path, name+"scale"), bytes.Repeat([]byte{0xFE}, 64*2))
		patchBytes(t, path, tensorOffset(t, path, name+"packed"), bytes.Repeat([]byte{0x77}, 64*32))
	}
}

// TestNonFiniteFailsTheStep puts a NaN (an overflow for the MXFP4 experts)
// into one matrix of every class, which the loader does not scan: the step
// fails with ErrNonFinite naming the layer and the op, never a panic or a
// hang, with every weight resident and with experts streamed under a
// budget; the model stays usable (the next step fails the same way at
// once, Close returns), and where a clean input avoids the bad value (an
// embedding row) it gets exactly the logits of an intact model.
func TestNonFiniteFailsTheStep(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	long := make([]int, 100) // 100 rows × top-2 choices: more than the pass's rows
	for i := range long {
		long[i] = 1 + i%200
	}
	clean := []int{2, 3, 4, 5}
	// No budget; experts streamed; trunk and embedding rows streamed too.
	for _, budget := range []int64{0, 56e6, 53e6} {
		ref, err := k3.Open(src, k3.Options{MaxContext: 256, RAMBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		want, err := stepLogits(t, ref, clean)
		if err != nil {
			t.Fatal(err)
		}
		ref.Close()
		for _, c := range nanCases {
			t.Run(fmt.Sprintf("%s/budget=%d", c.class, budget), func(t *testing.T) {
				dir := copyDir(t, src)
				p := filepath.Join(dir, "model.safetensors")
				if c.patch != nil {
					c.patch(t, p, tensorOffset(t, p, c.tensor))
				} else {
					overflowExperts(t, p)
				}
				m, err := k3.Open(dir, k3.Options{MaxContext: 256, RAMBudget: budget})
				if err != nil {
					t.Fatal(err)
				}
				for _, tokens := range [][]int{{1, 2, 3}, long} {
					_, err := stepLogits(t, m, tokens)
					if !errors.Is(err, k3.ErrNonFinite) || !strings.Contains(err.Error(), c.op) {
						t.Fatalf("%d tokens: got %v, want ErrNonFinite naming %q", len(tokens), err, c.op)
					}
				}
				if c.class == "embedding" {
					got, err := stepLogits(t, m, clean)
					if err != nil {
						t.Fatal(err)
					}
					if !sameBits(got, want) {
						t.Fatal("a clean session after the failed steps differs from an intact model")
					}
				}
				if err := within(t, "Close", m.Close); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// sameBits says whether a and b hold the same non-empty values, bit for bit.
func sameBits(a, b []float32) bool { return len(a) > 0 && firstBitDiff(a, b) < 0 }

// firstBitDiff returns the first index where got and want differ bit for
// bit (a length mismatch differs at the shorter length), or -1.
func firstBitDiff(got, want []float32) int {
	for i := range min(len(got), len(want)) {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	if len(got) != len(want) {
		return min(len(got), len(want))
	}
	return -1
}

// TestNonFiniteState restores a saved state holding a NaN (with a valid
// checksum, as a buggy writer or a crafted file would have it): its step
// fails with ErrNonFinite; a clean session of the same model, stepping at
// the same time and afterwards, gets exactly the logits of an intact run,
// with and without a budget.
func TestNonFiniteState(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	for _, budget := range []int64{0, 56e6, 53e6} {
		m, err := k3.Open(src, k3.Options{MaxContext: 64, RAMBudget: budget, Sessions: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		want, err := stepLogits(t, m, []int{7, 8, 9})
		if err != nil {
			t.Fatal(err)
		}

		s := m.NewSession()
		if _, err := s.Step(ctx, []int{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := s.Save(&buf); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		// The first KDA layer's recurrent state follows the header
		// and the three tokens.
		binary.LittleEndian.PutUint32(b[stateHeaderBytes+4*3:], math.Float32bits(float32(math.NaN())))
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
		if err := s.Load(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		err = within(t, "a step", func() error { _, err := s.Step(ctx, []int{4}); return err })
		if !errors.Is(err, k3.ErrNonFinite) || !strings.Contains(err.Error(), "layer 0: non-finite values: KDA attention") {
			t.Fatalf("budget %d: got %v, want ErrNonFinite in layer 0's attention", budget, err)
		}
		got, err := stepLogits(t, m, []int{7, 8, 9})
		if err != nil || !sameBits(got, want) {
			t.Fatalf("budget %d: a clean session after the failed step: %v, or its logits differ", budget, err)
		}
		s.Reset()
		if _, err := s.Step(ctx, []int{7, 8, 9}); err != nil {
			t.Fatalf("budget %d: the reset session: %v", budget, err)
		}
		s.Close()
		if err := within(t, "Close", m.Close); err != nil {
			t.Fatal(err)
		}
	}
}

// nanState returns a saved state of tokens whose first KDA value is NaN,
// with a valid checksum.
func nanState(t *testing.T, m *k3.Model, tokens []int) []byte {
	t.Helper()
	s := m.NewSession()
	defer s.Close()
	if _, err := s.Step(context.Background(), tokens); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[stateHeaderBytes+4*len(tokens):], math.Float32bits(float32(math.NaN())))
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestNonFiniteInBatch steps four sessions at once under a budget, one of
// them restored from a state holding a NaN: it fails with ErrNonFinite;
// the others, whether or not they shared its pass (rows are isolated),
// get exactly their solo logits; nothing hangs, and the model then serves
// a clean session exactly.
func TestNonFiniteInBatch(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	m, err := k3.Open(src, k3.Options{MaxContext: 64, RAMBudget: 60e6, Sessions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{7, 8, 9}
	want, err := stepLogits(t, m, ids)
	if err != nil {
		t.Fatal(err)
	}
	bad := nanState(t, m, []int{1, 2, 3})
	ctx := context.Background()
	before := m.Stats()
	for round := 0; round < 5; round++ {
		errs := make([]error, 4)
		outs := make([][]float32, 4)
		gate := make(chan struct{})
		done := make(chan int, 4)
		for g := range 4 {
			go func() {
				defer func() { done <- g }()
				s := m.NewSession()
				defer s.Close()
				if g == 0 {
					if errs[g] = s.Load(bytes.NewReader(bad)); errs[g] != nil {
						return
					}
				}
				<-gate
				l, err := s.Step(ctx, ids)
				outs[g], errs[g] = append([]float32(nil), l...), err
			}()
		}
		close(gate)
		for range 4 {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("sessions hang after a non-finite step")
			}
		}
		if !errors.Is(errs[0], k3.ErrNonFinite) {
			t.Fatalf("the NaN session: got %v, want ErrNonFinite", errs[0])
		}
		for g := 1; g < 4; g++ {
			if errs[g] != nil || !sameBits(outs[g], want) {
				t.Fatalf("round %d, session %d: %v, or its logits differ from its solo run", round, g, errs[g])
			}
		}
	}
	st := m.Stats()
	t.Logf("%d rows in %d passes: sessions shared passes", st.Rows-before.Rows, st.Passes-before.Passes)
	got, err := stepLogits(t, m, ids)
	if err != nil || !sameBits(got, want) {
		t.Fatalf("a clean session afterwards: %v, or its logits differ", err)
	}
	if err := within(t, "Close", m.Close); err != nil {
		t.Fatal(err)
	}
}

// stateHeaderBytes is the saved state's header (model/statefile.go): magic
// 8, version 4, config fingerprint 8, checkpoint fingerprint 32, position
// 8 and pending count 8.
const stateHeaderBytes = 8 + 4 + 8 + 32 + 8 + 8
