package model

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
)

type oracleExpected struct {
	PromptIDs  []int       `json:"prompt_ids"`
	FullIDs    []int       `json:"full_ids"`
	TFPred     []int       `json:"tf_pred"`
	LogitsHead [][]float64 `json:"logits_head"`
	LastLogits []float64   `json:"last_logits"`
}

func loadOracle(t *testing.T, name string) (*Model, *oracleExpected) {
	t.Helper()
	dir := fixtures.Path(t, "oracle/"+name)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	plan, err := NewPlan(cfg, ck)
	if err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context, e Extent, buf []byte) error {
		return ck.ReadRange(e.File, e.Off, buf[e.BufOff:e.BufOff+e.Size])
	}
	m, err := Load(context.Background(), plan, read, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	var exp oracleExpected
	raw, err = os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
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

func TestOracleTeacherForcing(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			m, exp := loadOracle(t, name)
			V := m.Cfg.Vocab
			s := m.NewSession(64)
			logits := make([]float32, len(exp.FullIDs)*V)
			if err := s.Forward(context.Background(), exp.FullIDs, logits, true); err != nil {
				t.Fatal(err)
			}
			var maxD float64
			for i := range exp.FullIDs {
				row := logits[i*V : (i+1)*V]
				if i < len(exp.FullIDs)-1 && i >= len(exp.PromptIDs)-1 && argmax(row) != exp.TFPred[i] {
					t.Errorf("position %d: argmax %d, want %d", i, argmax(row), exp.TFPred[i])
				}
				for j, w := range exp.LogitsHead[i] {
					maxD = math.Max(maxD, math.Abs(float64(row[j])-w))
				}
			}
			last := logits[(len(exp.FullIDs)-1)*V:]
			for j, w := range exp.LastLogits {
				maxD = math.Max(maxD, math.Abs(float64(last[j])-w))
			}
			t.Logf("max |Δlogit| = %.3g", maxD)
			if maxD > 1e-4 {
				t.Errorf("max |Δlogit| = %g > 1e-4", maxD)
			}
		})
	}
}

// greedy generates len(full)-len(prompt) tokens, either re-running a fresh
// forward over the whole sequence each step (full) or feeding one token at
// a time with carried state (incremental), and returns the last logits of
// every step.
func greedy(t *testing.T, m *Model, prompt []int, n int, full bool) ([]int, [][]float32) {
	t.Helper()
	V := m.Cfg.Vocab
	s := m.NewSession(64)
	seq := append([]int(nil), prompt...)
	var steps [][]float32
	logits := make([]float32, V)
	feed := prompt
	for i := 0; i < n; i++ {
		if full {
			s.st.Reset()
			feed = seq
		}
		if err := s.Forward(context.Background(), feed, logits, false); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, append([]float32(nil), logits...))
		next := argmax(logits)
		seq = append(seq, next)
		feed = []int{next}
	}
	return seq, steps
}

func TestOracleGreedyAndIncremental(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			m, exp := loadOracle(t, name)
			n := len(exp.FullIDs) - len(exp.PromptIDs)
			fullSeq, fullLogits := greedy(t, m, exp.PromptIDs, n, true)
			incSeq, incLogits := greedy(t, m, exp.PromptIDs, n, false)
			for i := range exp.FullIDs {
				if fullSeq[i] != exp.FullIDs[i] {
					t.Fatalf("full recompute: token %d = %d, want %d (got %v)", i, fullSeq[i], exp.FullIDs[i], fullSeq)
				}
				if incSeq[i] != exp.FullIDs[i] {
					t.Fatalf("incremental: token %d = %d, want %d (got %v)", i, incSeq[i], exp.FullIDs[i], incSeq)
				}
			}
			// Batched prefill and one-token steps share their arithmetic:
			// both modes give bit-identical logits at every step.
			for i := range fullLogits {
				for j := range fullLogits[i] {
					if math.Float32bits(fullLogits[i][j]) != math.Float32bits(incLogits[i][j]) {
						t.Fatalf("step %d logit %d: full %v, incremental %v", i, j, fullLogits[i][j], incLogits[i][j])
					}
				}
			}
		})
	}
}

func teacherLogits(t *testing.T, m *Model, ids []int) []float32 {
	t.Helper()
	s := m.NewSession(64)
	out := make([]float32, len(ids)*m.Cfg.Vocab)
	if err := s.Forward(context.Background(), ids, out, true); err != nil {
		t.Fatal(err)
	}
	return out
}
