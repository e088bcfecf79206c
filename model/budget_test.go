package model

import (
	"cmp"
	"slices"
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

// TestPlanTrunkCost walks budgets from the floor to everything resident:
// the planner's estimate of a pass (passCost) never grows with the budget,
// the ring always holds the largest streamed part and never more than the
// two consecutive streamed parts that need the most, somewhere it grows
// past the largest part, and no other number of pinned parts that fits
// would cost less.
func TestPlanTrunkCost(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		base, _ := loadOracle(t, name)
		p := base.Plan
		req := BudgetRequest{MaxContext: 64, Chunk: 64}
		floor := p.FloorBudget(req)
		full, err := p.PlanMemory(BudgetRequest{Budget: 1 << 40, MaxContext: 64, Chunk: 64})
		if err != nil {
			t.Fatal(err)
		}
		last, grew := 1e300, false
		for budget := floor; budget <= full.Total()+(1<<20); budget += max(1, (full.Total()-floor)/97) {
			r := req
			r.Budget = budget
			mp, err := p.PlanMemory(r)
			if err != nil {
				t.Fatalf("%s budget %d: %v", name, budget, err)
			}
			ring := int64(mp.RingSlots) * mp.RingSlotBytes
			cost := 0.0
			if mp.Streaming() {
				cost = p.passCost(mp.Pinned, ring)
			}
			if cost > last {
				t.Fatalf("%s budget %d: pass cost %.0f, %.0f at a smaller budget", name, budget, cost, last)
			}
			last = cost
			if !mp.Streaming() {
				continue
			}
			var streamed []int
			var largest, pair int64
			for u := range p.parts {
				if !mp.Pinned[u] {
					streamed = append(streamed, u)
					largest = max(largest, iox.AlignUp(p.parts[u].room()))
				}
			}
			for i, u := range streamed {
				v := streamed[(i+1)%len(streamed)]
				if len(streamed) > 1 {
					pair = max(pair, iox.AlignUp(p.parts[u].room())+iox.AlignUp(p.parts[v].room()))
				}
			}
			if ring < largest || ring > max(largest, pair) {
				t.Fatalf("%s budget %d: ring %d, largest streamed part %d, largest pair %d", name, budget, ring, largest, pair)
			}
			if ring > largest {
				grew = true
			}
			// Pinning one part more or one fewer (largest first), with
			// the ring that then fits, costs no less.
			npin := 0
			for _, x := range mp.Pinned {
				if x {
					npin++
				}
			}
			for _, k := range []int{npin - 1, npin + 1} {
				if alt, ok := planWithPinned(p, r, k); ok && alt < cost {
					t.Fatalf("%s budget %d: %d pinned parts cost %.0f, the plan's %d cost %.0f", name, budget, k, alt, npin, cost)
				}
			}
		}
		if !grew {
			t.Errorf("%s: the ring never grew beyond the largest streamed part", name)
		}
	}
}

// planWithPinned is the pass cost of pinning the k largest parts with the
// largest ring the budget then holds (up to the pairs' need), if that fits.
func planWithPinned(p *Plan, req BudgetRequest, k int) (float64, bool) {
	if k < 0 || k >= len(p.parts) {
		return 0, false
	}
	order := make([]int, len(p.parts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.parts[b].room(), p.parts[a].room()) })
	pin := make([]bool, len(p.parts))
	var pinned int64
	for _, u := range order[:k] {
		pin[u] = true
		pinned += BufferBytes(p.parts[u].room())
	}
	// What the planner keeps beside the trunk: its floor less the ring.
	floor := p.FloorBudget(req)
	slot0 := BufferBytes(iox.AlignUp(p.parts[order[0]].room()))
	base := floor - slot0
	slot := iox.AlignUp(p.parts[order[k]].room())
	avail := req.Budget - base - pinned
	if avail < BufferBytes(slot) {
		return 0, false
	}
	return p.passCost(pin, p.ringFor(pin, slot, avail)), true
}
