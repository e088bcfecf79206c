package planner

import (
	"errors"
	"testing"
)

// TestMaxContext: the context MaxContext picks plans at its budget (never
// ErrBudget), one position more does not (unless it is the limit), a
// larger budget never holds less, and below the floor nothing fits; for
// one and several sessions, with the planner's rows and with fixed ones.
func TestMaxContext(t *testing.T) {
	w := oracleWeights(t, "tiny-mxfp4")
	const limit = 1 << 20
	for _, base := range []Request{
		{Sessions: 1, Threads: 2, Executable: 9 << 20},
		{Sessions: 3, Threads: 2, Executable: 9 << 20, PrefixRAMAuto: true},
		{Sessions: 2, MaxBatch: 32, Threads: 2, Executable: 9 << 20, Speculate: 4},
	} {
		floor := Floor(w, Request{Sessions: base.Sessions, MaxBatch: base.MaxBatch, Threads: 2, Executable: 9 << 20, Speculate: base.Speculate, MaxContext: 1})
		prev := 0
		for _, extra := range []int64{0, 1 << 20, 8 << 20, 64 << 20, 1 << 30} {
			req := base
			req.Budget = floor + extra
			n := MaxContext(w, req, limit)
			if n < 1 || n < prev {
				t.Fatalf("%+v: budget floor+%d holds %d positions (a smaller budget held %d)", base, extra, n, prev)
			}
			prev = n
			req.MaxContext = n
			if _, err := Plan(w, req); err != nil {
				t.Errorf("%+v: the context MaxContext chose, %d, does not plan: %v", base, n, err)
			}
			if n < limit {
				req.MaxContext = n + 1
				if _, err := Plan(w, req); !errors.Is(err, ErrBudget) {
					t.Errorf("%+v: %d positions plan too (MaxContext said %d is the most): %v", base, n+1, n, err)
				}
			}
		}
		req := base
		req.Budget = floor - 1
		if n := MaxContext(w, req, limit); n != 0 {
			t.Errorf("%+v: below the floor, %d positions", base, n)
		}
		req.Budget = 0
		if n := MaxContext(w, req, 5000); n != 5000 {
			t.Errorf("%+v: without a budget, %d positions, want the limit", base, n)
		}
		req.Budget = floor + 1<<30
		if n := MaxContext(w, req, 100); n != 100 {
			t.Errorf("%+v: a large budget gives %d positions, want the limit 100", base, n)
		}
	}
}
