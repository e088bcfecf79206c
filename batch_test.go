package k3_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// soloLogits runs ids through a lone session and returns every position's
// logits.
func soloLogits(t *testing.T, m *k3.Model, ids []int) []float32 {
	t.Helper()
	s := m.NewSession()
	defer s.Close()
	out, err := s.Logits(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBatchedSessionsBitIdentical runs 16 goroutines, each its own session
// with its own random sequence fed in random steps (prompt chunks and
// single tokens, so that some prefill while others decode, and sessions
// join and leave between passes), and checks every logit bit for bit
// against the same sequence alone; it checks that passes really were
// shared. Under -race in CI.
func TestBatchedSessionsBitIdentical(t *testing.T) {
	for _, budget := range []int64{0, 60e6} {
		m, _ := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: budget, MaxContext: 64, Sessions: 16, MaxBatch: 24})
		V := m.Config().Vocab
		rng := rand.New(rand.NewPCG(5, uint64(budget)))
		const n = 16
		seqs := make([][]int, n)
		want := make([][]float32, n)
		for i := range seqs {
			seqs[i] = make([]int, 3+rng.IntN(40))
			for j := range seqs[i] {
				seqs[i][j] = rng.IntN(V)
			}
			want[i] = soloLogits(t, m, seqs[i])
		}
		before := m.Stats()
		var wg sync.WaitGroup
		for g := range n {
			steps := rand.New(rand.NewPCG(uint64(g), 9))
			wg.Go(func() {
				s := m.NewSession()
				defer s.Close()
				seq := seqs[g]
				for done := 0; done < len(seq); {
					k := 1
					if steps.IntN(3) == 0 {
						k = 1 + steps.IntN(12)
					}
					k = min(k, len(seq)-done)
					got, err := s.Logits(context.Background(), seq[done:done+k])
					if err != nil {
						t.Errorf("session %d: %v", g, err)
						return
					}
					for i, v := range got {
						if w := want[g][done*V+i]; math.Float32bits(v) != math.Float32bits(w) {
							t.Errorf("budget %d session %d position %d logit %d: batched %v, alone %v", budget, g, done+i/V, i%V, v, w)
							return
						}
					}
					done += k
				}
			})
		}
		wg.Wait()
		d := m.Stats().Sub(before)
		if d.Passes == 0 || d.Rows <= d.Passes {
			t.Fatalf("budget %d: %d rows in %d passes: the sessions never shared a pass", budget, d.Rows, d.Passes)
		}
		t.Logf("budget %d: %d rows in %d passes (%.1f per pass)", budget, d.Rows, d.Passes, float64(d.Rows)/float64(d.Passes))
	}
}

// TestOracleGatesInBatch runs each oracle's prompt through Generate while
// other sessions generate from other prompts at the same time: the greedy
// tokens are the oracle's (gates 2 and 3 inside a batch), and the
// teacher-forced argmax matches too (gate 1).
func TestOracleGatesInBatch(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			m, exp := openOracle(t, name, k3.Options{MaxContext: 64, Sessions: 5})
			want := exp.FullIDs[len(exp.PromptIDs):]
			var wg sync.WaitGroup
			for g := 0; g < 5; g++ {
				wg.Go(func() {
					prompt := exp.PromptIDs
					if g > 0 {
						prompt = append([]int{g, g + 7}, exp.PromptIDs[:g]...) // others
					}
					var got []int
					for tok, err := range m.Generate(context.Background(), prompt, k3.GenerateOptions{MaxTokens: len(want)}) {
						if err != nil {
							t.Error(err)
							return
						}
						got = append(got, tok.ID)
					}
					if g != 0 {
						return
					}
					for i := range want {
						if got[i] != want[i] {
							t.Errorf("token %d = %d, oracle %d", i, got[i], want[i])
							return
						}
					}
				})
			}
			wg.Go(func() {
				s := m.NewSession()
				defer s.Close()
				lg, err := s.Logits(context.Background(), exp.FullIDs)
				if err != nil {
					t.Error(err)
					return
				}
				V := m.Config().Vocab
				for i := len(exp.PromptIDs) - 1; i < len(exp.FullIDs)-1; i++ {
					if a := argmax(lg[i*V : (i+1)*V]); a != exp.TFPred[i] {
						t.Errorf("teacher forcing position %d: argmax %d, oracle %d", i, a, exp.TFPred[i])
					}
				}
			})
			wg.Wait()
		})
	}
}

// TestBatchCancelLeavesStateIntact cancels one session's long prompt while
// another session keeps the passes busy: the cancelled step returns the
// context's error at a pass boundary, the tokens it fed stay in the
// sequence, and the session goes on to give exactly the logits of a
// sequence that never was interrupted.
func TestBatchCancelLeavesStateIntact(t *testing.T) {
	m, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 4096, Sessions: 2, PrefillChunk: 4, MaxBatch: 5})
	V := m.Config().Vocab
	rng := rand.New(rand.NewPCG(1, 1))
	long := make([]int, 3000)
	for i := range long {
		long[i] = rng.IntN(V)
	}
	// How long a few passes take here (the race detector and a loaded
	// machine make them slow): the cancel must come after the step's
	// first pass, and long before its last.
	probe := m.NewSession()
	t0 := time.Now()
	if _, err := probe.Step(context.Background(), long[:3*4]); err != nil {
		t.Fatal(err)
	}
	settle := max(50*time.Millisecond, 2*time.Since(t0))
	probe.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s := m.NewSession()
	defer s.Close()
	// The other session shares every pass, so passes go on after the
	// cancel and the cancelled step leaves at a pass boundary.
	busy := m.NewSession()
	defer busy.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if _, err := busy.Step(context.Background(), long[:1500]); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(10 * time.Millisecond)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Step(ctx, long)
		errc <- err
	}()
	time.Sleep(settle)
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled step did not return")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	fed := s.Len()
	if fed == 0 || fed >= len(long) {
		t.Fatalf("%d of %d tokens fed before the cancel took effect", fed, len(long))
	}
	// The session continues where it stopped.
	rest := long[fed : fed+3]
	got, err := s.Logits(context.Background(), rest)
	if err != nil {
		t.Fatal(err)
	}
	want := soloLogits(t, m, long[:fed+3])[fed*V:]
	if i := firstBitDiff(got, want); i >= 0 {
		t.Fatalf("logit %d after the cancel: %v, uninterrupted %v", i, got[i], want[i])
	}
}

// TestDefaultSessionGivesWay checks that Model.Step's default session does
// not keep the only budget place from Model.Generate.
func TestDefaultSessionGivesWay(t *testing.T) {
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: 60e6, MaxContext: 64})
	ctx := context.Background()
	if _, err := m.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatal(err)
	}
	var got []int
	for tok, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 3}) {
		if err != nil {
			t.Fatalf("Generate after Model.Step: %v", err)
		}
		got = append(got, tok.ID)
	}
	for i, id := range got {
		if id != exp.FullIDs[len(exp.PromptIDs)+i] {
			t.Fatalf("token %d = %d, want %d", i, id, exp.FullIDs[len(exp.PromptIDs)+i])
		}
	}
	// The default session starts over, and still works.
	lg, err := m.Step(ctx, exp.PromptIDs)
	if err != nil {
		t.Fatal(err)
	}
	if a := argmax(lg); a != exp.FullIDs[len(exp.PromptIDs)] {
		t.Fatalf("default session after giving way: argmax %d, want %d", a, exp.FullIDs[len(exp.PromptIDs)])
	}
}

// TestSessionsFit checks the planner's count of sessions a budget holds:
// one at the one-session floor, none below it, and every count it reports
// opens and steps.
func TestSessionsFit(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	if n := in.SessionsFit(in.FloorBytes, 0); n != 1 {
		t.Fatalf("%d sessions at the one-session floor, want 1", n)
	}
	if n := in.SessionsFit(in.FloorBytes-1, 0); n != 0 {
		t.Fatalf("%d sessions below the floor, want 0", n)
	}
	budget := in.FloorBytes + 8<<20
	n := in.SessionsFit(budget, 0)
	if n < 2 {
		t.Fatalf("%d sessions with 8 MiB above the floor", n)
	}
	m, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: 64, Sessions: n})
	if err != nil {
		t.Fatalf("%d sessions at %d bytes: %v", n, budget, err)
	}
	defer m.Close()
	if _, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: 64, Sessions: n + 1}); !errors.Is(err, k3.ErrBudget) {
		t.Fatalf("%d sessions: %v, want ErrBudget", n+1, err)
	}
}
