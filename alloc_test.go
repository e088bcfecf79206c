package k3_test

import (
	"context"
	"testing"

	"github.com/k3go/k3"
)

// TestDecodeStepAllocates nothing: a decode step with every weight resident
// runs with no heap allocation (the hot path reuses its scratch, state and
// logits buffers).
func TestDecodeStepAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	m, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 1 << 16})
	s := m.NewSession()
	ctx := context.Background()
	if _, err := s.Step(ctx, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	tok := []int{5}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := s.Step(ctx, tok); err != nil {
			t.Fatal(err)
		}
	})
	// The MLA cache and the attention scores grow geometrically with the
	// context: a few reallocations over 100 steps are amortised, not per
	// token.
	if allocs > 0.1 {
		t.Fatalf("%.2f allocations per decode step, want none", allocs)
	}
}
