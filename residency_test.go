package k3_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/k3go/k3"
)

// TestPlanMovesExact runs long prompts and decoding at a budget where the
// engine moves to wider passes for a prompt and back to its resting plan
// for decoding (issue 31), alone and with another session decoding while
// one prefills: every token and every prompt's last logits equal those of
// the same sequences with everything resident, the moves happened, and
// once back at rest decoding streams no more of the trunk than the
// resting plan does.
func TestPlanMovesExact(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 250 MB checkpoint")
	}
	dir := wideCheckpoint(t)
	const ctxLen = 1024
	in, err := k3.Inspect(dir, k3.Options{MaxContext: ctxLen, Sessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A budget whose resting plan pins more of the trunk than the plan it
	// takes for a 500-token prompt.
	var budget int64
	var rest *k3.MemoryPlan
	for b := in.FloorBytes; b < in.FullBytes && budget == 0; b += (in.FullBytes - in.FloorBytes) / 64 {
		wp, err := in.PlanWork(b, 2, k3.Workload{PromptRows: 500})
		if err != nil {
			t.Fatal(err)
		}
		r, err := in.PlanSessions(b, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !wp.Resting && wp.Plan.PinnedParts < r.PinnedParts {
			budget, rest = b, r
		}
	}
	if budget == 0 {
		t.Fatal("no budget moves trunk parts for a long prompt")
	}
	prompts := make([][]int, 2)
	for i := range prompts {
		p := make([]int, 500-200*i)
		for j := range p {
			p[j] = (j*131 + i*17) % 4096
		}
		prompts[i] = p
	}
	type result struct {
		logits []float32
		tokens []int
	}
	run := func(m *k3.Model, p []int) result {
		s := m.NewSession()
		defer s.Close()
		l, err := s.Step(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		r := result{logits: append([]float32(nil), l...)}
		// Greedy decoding, every step's logits kept.
		for range 4 {
			tok := 0
			for j, v := range l {
				if v > l[tok] {
					tok = j
				}
			}
			r.tokens = append(r.tokens, tok)
			if l, err = s.Step(context.Background(), []int{tok}); err != nil {
				t.Fatal(err)
			}
			r.logits = append(r.logits, l...)
		}
		return r
	}
	ref, err := k3.Open(dir, k3.Options{MaxContext: ctxLen, Sessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	var want []result
	for _, p := range prompts {
		want = append(want, run(ref, p))
	}
	ref.Close()

	m, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: ctxLen, Sessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	same := func(what string, got, want result) {
		t.Helper()
		for i := range want.logits {
			if math.Float32bits(got.logits[i]) != math.Float32bits(want.logits[i]) {
				t.Fatalf("%s: logit %d = %v, everything resident %v", what, i, got.logits[i], want.logits[i])
			}
		}
		if fmt.Sprint(got.tokens) != fmt.Sprint(want.tokens) {
			t.Fatalf("%s: tokens %v, everything resident %v", what, got.tokens, want.tokens)
		}
	}
	for i, p := range prompts {
		st := m.Stats()
		same(fmt.Sprintf("prompt %d alone", i), run(m, p), want[i])
		if d := m.Stats().Sub(st); d.PlanMoves < 2 && len(p) > 256 {
			t.Errorf("prompt %d (%d tokens): %d moves between memory plans, want one there and one back", i, len(p), d.PlanMoves)
		}
	}
	// Decoding at rest streams only what the resting plan streams.
	s := m.NewSession()
	if _, err := s.Step(context.Background(), prompts[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(context.Background(), []int{7}); err != nil { // the move back
		t.Fatal(err)
	}
	st := m.Stats()
	for i := 0; i < 3; i++ {
		if _, err := s.Step(context.Background(), []int{11 + i}); err != nil {
			t.Fatal(err)
		}
	}
	// (Direct reads round each part out to aligned windows: 1% slack. The
	// ring may also have begun the next pass's first parts when the steps
	// end, at most one pass more: a loaded run counted 6.3 MB of them.
	// Moves to another plan are counted apart, and must be none.)
	if d := m.Stats().Sub(st); d.PlanMoves != 0 || d.TrunkBytesRead > 4*rest.TrunkBytesPerPass*101/100 {
		t.Errorf("3 decode steps at rest: %d moves, %d trunk bytes streamed; the resting plan streams %d per pass", d.PlanMoves, d.TrunkBytesRead, rest.TrunkBytesPerPass)
	}
	s.Close()
	// One session decodes while another prefills: they share passes, in
	// whichever plan the engine is in.
	var wg sync.WaitGroup
	got := make([]result, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = run(m, prompts[i])
		}()
	}
	wg.Wait()
	for i := range got {
		same(fmt.Sprintf("prompt %d beside another", i), got[i], want[i])
	}
}
