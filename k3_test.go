package k3_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

type oracleExpected struct {
	PromptIDs  []int       `json:"prompt_ids"`
	FullIDs    []int       `json:"full_ids"`
	TFPred     []int       `json:"tf_pred"`
	LogitsHead [][]float64 `json:"logits_head"`
	LastLogits []float64   `json:"last_logits"`
}

var oracles = []string{"tiny-f32", "tiny-mxfp4"}

func openOracle(t *testing.T, name string, opts k3.Options) (*k3.Model, *oracleExpected) {
	t.Helper()
	dir := fixtures.Path(t, "oracle/"+name)
	m, err := k3.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	raw, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp oracleExpected
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	return m, &exp
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// checkLogits compares teacher-forced logits with the oracle: GATE 1
// (argmax over the generated span), logits_head and last_logits within 1e-4.
func checkLogits(t *testing.T, exp *oracleExpected, logits []float32, V int) {
	t.Helper()
	var maxD float64
	for i := range exp.FullIDs {
		row := logits[i*V : (i+1)*V]
		if i >= len(exp.PromptIDs)-1 && i < len(exp.FullIDs)-1 && argmax(row) != exp.TFPred[i] {
			t.Errorf("GATE 1: position %d argmax %d, want %d", i, argmax(row), exp.TFPred[i])
		}
		for j, w := range exp.LogitsHead[i] {
			maxD = math.Max(maxD, math.Abs(float64(row[j])-w))
		}
	}
	last := logits[(len(exp.FullIDs)-1)*V:]
	for j, w := range exp.LastLogits {
		maxD = math.Max(maxD, math.Abs(float64(last[j])-w))
	}
	if maxD > 1e-4 {
		t.Errorf("max |Δlogit| = %g > 1e-4", maxD)
	}
}

func TestOracleGates(t *testing.T) {
	for _, name := range oracles {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m, exp := openOracle(t, name, k3.Options{})
			V := m.Config().Vocab
			// GATE 1: one teacher-forced forward.
			logits, err := m.NewSession().Logits(ctx, exp.FullIDs)
			if err != nil {
				t.Fatal(err)
			}
			checkLogits(t, exp, logits, V)
			// The same positions fed one token at a time.
			s := m.NewSession()
			inc := make([]float32, 0, len(logits))
			for _, id := range exp.FullIDs {
				l, err := s.Step(ctx, []int{id})
				if err != nil {
					t.Fatal(err)
				}
				inc = append(inc, l...)
			}
			checkLogits(t, exp, inc, V)
			// GATE 2 (full recompute) and GATE 3 (incremental).
			n := len(exp.FullIDs) - len(exp.PromptIDs)
			plain := k3.GenerateOptions{MaxTokens: n}
			for mode, opts := range []k3.GenerateOptions{k3.FullRecompute(plain), plain} {
				var got []int
				for tok, err := range m.Generate(ctx, exp.PromptIDs, opts) {
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, tok.ID)
				}
				want := exp.FullIDs[len(exp.PromptIDs):]
				if len(got) != len(want) {
					t.Fatalf("mode %d: %d tokens, want %d", mode, len(got), len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("mode %d: token %d = %d, want %d (got %v)", mode, i, got[i], want[i], got)
					}
				}
			}
		})
	}
}

// TestThreadsAndChunksBitIdentical checks the self-consistency contract:
// logits are bit-identical whatever the thread count or prefill chunk.
func TestThreadsAndChunksBitIdentical(t *testing.T) {
	for _, name := range oracles {
		t.Run(name, func(t *testing.T) {
			var ref []float32
			for _, opts := range []k3.Options{{Threads: 1}, {Threads: 4}, {Threads: 3, PrefillChunk: 5}, {Threads: 2, PrefillChunk: 1}} {
				m, exp := openOracle(t, name, opts)
				logits, err := m.NewSession().Logits(context.Background(), exp.FullIDs)
				if err != nil {
					t.Fatal(err)
				}
				if ref == nil {
					ref = logits
					continue
				}
				for i := range ref {
					if math.Float32bits(ref[i]) != math.Float32bits(logits[i]) {
						t.Fatalf("options %+v: logit %d = %v, want %v (threads=1)", opts, i, logits[i], ref[i])
					}
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	m, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 16})
	ctx := context.Background()
	s := m.NewSession()
	if _, err := s.Step(ctx, []int{1, 256}); !errors.Is(err, k3.ErrTokenOutOfRange) {
		t.Errorf("token 256 of 256: got %v, want ErrTokenOutOfRange", err)
	}
	if _, err := s.Step(ctx, []int{-1}); !errors.Is(err, k3.ErrTokenOutOfRange) {
		t.Errorf("token -1: got %v, want ErrTokenOutOfRange", err)
	}
	if _, err := s.Step(ctx, make([]int, 17)); !errors.Is(err, k3.ErrContextFull) {
		t.Errorf("17 tokens in a 16-position session: got %v, want ErrContextFull", err)
	}
	if _, err := s.Step(ctx, []int{1, 2}); err != nil {
		t.Errorf("valid step after refused ones: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.NewSession().Step(cctx, []int{1}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
	for _, o := range []k3.GenerateOptions{{MaxTokens: -1}, {Sampling: k3.SamplingOptions{TopP: 2}}, {StopTokens: []int{999}}} {
		for _, err := range m.Generate(ctx, []int{1}, o) {
			if err == nil {
				t.Errorf("options %+v accepted", o)
			}
		}
	}
	m.Close()
	if _, err := s.Step(ctx, []int{1}); !errors.Is(err, k3.ErrClosed) {
		t.Errorf("step after Close: got %v, want ErrClosed", err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := k3.Open(t.TempDir(), k3.Options{}); !errors.Is(err, k3.ErrBadConfig) {
		t.Errorf("empty dir: got %v, want ErrBadConfig", err)
	}
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(fixtures.Path(t, "oracle/tiny-mxfp4"), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	if _, err := k3.Open(dir, k3.Options{}); !errors.Is(err, k3.ErrBadCheckpoint) {
		t.Errorf("no shards: got %v, want ErrBadCheckpoint", err)
	}
	for _, bad := range []string{"no_layermap.json", "bad_layer_index.json", "bad_topk.json"} {
		raw, err := os.ReadFile(fixtures.Path(t, "cfg/"+bad))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
		if _, err := k3.Open(dir, k3.Options{}); !errors.Is(err, k3.ErrBadConfig) {
			t.Errorf("%s: got %v, want ErrBadConfig", bad, err)
		}
	}
}
