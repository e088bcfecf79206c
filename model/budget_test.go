package model

import (
	"testing"

	"github.com/k3go/k3/iox"
)

// TestBufferBytes checks the rounding the plan counts for the engine's
// buffers: pages below HugeBufferMin, whole huge pages from it on.
func TestBufferBytes(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{0, 0}, {1, iox.Align}, {iox.Align, iox.Align}, {iox.Align + 1, 2 * iox.Align},
		{HugeBufferMin - 1, HugeBufferMin}, {HugeBufferMin, HugeBufferMin},
		{HugeBufferMin + 1, HugeBufferMin + hugePage}, {HugeBufferMin + hugePage, HugeBufferMin + hugePage},
	} {
		if got := BufferBytes(c.n); got != c.want {
			t.Errorf("BufferBytes(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestPlanWithinBudget plans the tiny oracle at every budget from its floor
// up in steps and checks that the plan counts the process (executable,
// tokenizer, runtime), never exceeds the budget, leaves the Go heap at
// least its planned share, and that the floor does not depend on the
// thread count.
func TestPlanWithinBudget(t *testing.T) {
	base, _ := loadOracle(t, "tiny-mxfp4")
	p := base.Plan
	req := BudgetRequest{MaxContext: 64, Chunk: 64, Threads: 2, Executable: 9 << 20, Tokenizer: 3 << 20}
	floor := p.FloorBudget(req)
	for _, threads := range []int{1, 4, 16} {
		r := req
		r.Threads = threads
		if f := p.FloorBudget(r); f != floor {
			t.Errorf("floor %d with %d threads, %d with 2", f, threads, floor)
		}
	}
	for budget := floor; budget < floor+64<<20; budget += 3 << 20 {
		r := req
		r.Budget = budget
		mp, err := p.PlanMemory(r)
		if err != nil {
			t.Fatalf("budget %d (floor %d): %v", budget, floor, err)
		}
		if mp.Total() > budget {
			t.Fatalf("budget %d: planned %d", budget, mp.Total())
		}
		if mp.Executable != req.Executable || mp.Tokenizer != req.Tokenizer || mp.Runtime <= 0 || mp.Index <= 0 {
			t.Fatalf("budget %d: the plan leaves out the process: %+v", budget, mp)
		}
		if lim := mp.HeapLimit(); lim < mp.Heap() || lim+mp.OffHeap()+mp.Executable != budget {
			t.Fatalf("budget %d: heap %d, Go memory limit %d, off-heap %d", budget, mp.Heap(), lim, mp.OffHeap())
		}
	}
	r := req
	r.Budget = floor - 1
	if _, err := p.PlanMemory(r); err == nil {
		t.Fatal("a budget under the floor was planned")
	}
}
