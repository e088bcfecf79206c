// Package oracle loads the oracle checkpoints of the shared fixtures
// (oracle/tiny-f32, oracle/tiny-mxfp4: tiny K3-shaped models with the
// PyTorch reference's logits) and holds the checks that several packages
// run against them: batched passes against sequences alone, speculative
// rollback against plain decoding. The model package tests its math with
// resident weights; the trunk and the engine run the same checks with
// their weight sources.
package oracle

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Names are the oracle checkpoints.
var Names = []string{"tiny-f32", "tiny-mxfp4"}

// Expected is an oracle's expected.json.
type Expected struct {
	PromptIDs  []int       `json:"prompt_ids"`
	FullIDs    []int       `json:"full_ids"`
	TFPred     []int       `json:"tf_pred"`
	LogitsHead [][]float64 `json:"logits_head"`
	LastLogits []float64   `json:"last_logits"`
}

// Open binds oracle name's checkpoint (it is closed when the test ends)
// and reads its expectations.
func Open(t testing.TB, name string) (*model.Plan, *Expected) {
	t.Helper()
	dir := fixtures.Path(t, "oracle/"+name)
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	plan, err := model.NewPlan(cfg, ck)
	if err != nil {
		t.Fatal(err)
	}
	var exp Expected
	raw, err = os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	return plan, &exp
}

// Read returns a read function over p's checkpoint (buffered reads).
func Read(p *model.Plan) iox.ReadFunc {
	return func(ctx context.Context, e iox.Extent, buf []byte) error {
		return p.Ckpt.ReadRange(e.File, e.Off, buf[e.BufOff:e.BufOff+e.Size])
	}
}

// Load opens oracle name with every weight resident and opts otherwise.
func Load(t testing.TB, name string, opts model.Options) (*model.Model, *Expected) {
	t.Helper()
	p, exp := Open(t, name)
	m, err := model.Load(context.Background(), p, Read(p), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, exp
}

// Teacher runs ids through a fresh sequence of m and returns every
// position's logits.
func Teacher(t testing.TB, m *model.Model, ids []int) []float32 {
	t.Helper()
	s := m.NewSession(64)
	out := make([]float32, len(ids)*m.Cfg.Vocab)
	if err := s.Forward(context.Background(), ids, out, true); err != nil {
		t.Fatal(err)
	}
	return out
}

// SameBits fails the test at the first logit of got that is not
// bit-identical to want.
func SameBits(t testing.TB, what string, got, want []float32, vocab int) {
	t.Helper()
	for j := range want {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("%s: position %d logit %d: %v, want %v", what, j/vocab, j%vocab, got[j], want[j])
		}
	}
}

// CheckRandomBatches feeds seqs through m in random batch compositions
// (different lengths, some prefilling while others decode, sequences
// joining and leaving between passes, the group order shuffled, a scratch
// of rows rows so that groups split across sub-passes, computed in tiles
// of tile rows so that sequences split across tiles) and checks every
// logit bit for bit against want, each sequence's logits alone.
func CheckRandomBatches(t testing.TB, m *model.Model, rng *rand.Rand, seqs [][]int, want [][]float32, rows, tile int) {
	t.Helper()
	V := m.Cfg.Vocab
	sc := model.NewScratch(m.Cfg, rows, tile)
	states := make([]*model.State, len(seqs))
	got := make([][]float32, len(seqs))
	for i := range seqs {
		states[i] = model.NewState(m.Cfg, 64)
		got[i] = make([]float32, len(seqs[i])*V)
	}
	done := make([]int, len(seqs))
	for {
		var gs []model.Group
		for i := range seqs {
			left := len(seqs[i]) - done[i]
			if left == 0 || rng.IntN(3) == 0 { // finished, or sits this pass out
				continue
			}
			n := 1
			if rng.IntN(2) == 0 {
				n = 1 + rng.IntN(min(left, 9))
			}
			n = min(n, left)
			gs = append(gs, model.Group{St: states[i], Tokens: seqs[i][done[i] : done[i]+n], All: true, Out: got[i][done[i]*V : (done[i]+n)*V]})
			done[i] += n
		}
		if len(gs) == 0 {
			finished := true
			for i := range seqs {
				finished = finished && done[i] == len(seqs[i])
			}
			if finished {
				break
			}
			continue
		}
		rng.Shuffle(len(gs), func(a, b int) { gs[a], gs[b] = gs[b], gs[a] })
		if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
			t.Fatal(err)
		}
	}
	for i := range seqs {
		SameBits(t, "batched against alone", got[i], want[i], V)
	}
}

// CheckRollback runs speculative passes of random width over seq, keeps a
// random prefix of each (the true next tokens, garbage after them), in a
// pass shared with another sequence, and checks that the logits of every
// kept position are bit-identical to want, seq's logits alone.
func CheckRollback(t testing.TB, m *model.Model, rng *rand.Rand, seq []int, want []float32) {
	t.Helper()
	V := m.Cfg.Vocab
	sc := model.NewScratch(m.Cfg, 16, 3)
	st, other := model.NewState(m.Cfg, 64), model.NewState(m.Cfg, 64)
	otherSeq := seq[5:]
	out := make([]float32, 10*V)
	oout := make([]float32, V)
	for done, od := 0, 0; done < len(seq); {
		n := min(1+rng.IntN(6), len(seq)-done)
		keep := 1 + rng.IntN(n)
		rows := append([]int(nil), seq[done:done+keep]...)
		for len(rows) < n {
			rows = append(rows, rng.IntN(V))
		}
		st.BeginSpeculation(n)
		gs := []model.Group{{St: st, Tokens: rows, All: true, Out: out[:n*V]}}
		if od < len(otherSeq) {
			gs = append(gs, model.Group{St: other, Tokens: otherSeq[od : od+1], Out: oout})
			od++
		}
		if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
			t.Fatal(err)
		}
		if err := m.Rollback(st, keep); err != nil {
			t.Fatal(err)
		}
		SameBits(t, "kept speculative rows", out[:keep*V], want[done*V:(done+keep)*V], V)
		if st.Len() != done+keep {
			t.Fatalf("position %d after keeping %d of %d, want %d", st.Len(), keep, n, done+keep)
		}
		done += keep
	}
}
