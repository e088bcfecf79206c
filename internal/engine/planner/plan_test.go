package planner

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// oracleWeights summarises an oracle checkpoint with its trunk read from
// the shards (each part's room is its image, each load reads its payload).
func oracleWeights(t *testing.T, name string) *Weights {
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
	p, err := model.NewPlan(cfg, ck)
	if err != nil {
		t.Fatal(err)
	}
	w := &Weights{Cfg: cfg, Sizes: p.Sizes()}
	for _, pl := range p.Parts() {
		w.Parts = append(w.Parts, Part{Room: pl.Bytes, Read: pl.Payload, Payload: pl.Payload})
	}
	return w
}

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
	w := oracleWeights(t, "tiny-mxfp4")
	req := Request{MaxContext: 64, Chunk: 64, Threads: 2, Executable: 9 << 20, Tokenizer: 3 << 20}
	floor := Floor(w, req)
	for _, threads := range []int{1, 4, 16} {
		r := req
		r.Threads = threads
		if f := Floor(w, r); f != floor {
			t.Errorf("floor %d with %d threads, %d with 2", f, threads, floor)
		}
	}
	for budget := floor; budget < floor+64<<20; budget += 3 << 20 {
		r := req
		r.Budget = budget
		mp, err := Plan(w, r)
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
	if _, err := Plan(w, r); err == nil {
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
		w := oracleWeights(t, name)
		parts := w.Parts
		req := Request{MaxContext: 64, Chunk: 64}
		floor := Floor(w, req)
		full, err := Plan(w, Request{Budget: 1 << 40, MaxContext: 64, Chunk: 64})
		if err != nil {
			t.Fatal(err)
		}
		last, grew := 1e300, false
		for budget := floor; budget <= full.Total()+(1<<20); budget += max(1, (full.Total()-floor)/97) {
			r := req
			r.Budget = budget
			mp, err := Plan(w, r)
			if err != nil {
				t.Fatalf("%s budget %d: %v", name, budget, err)
			}
			ring := int64(mp.RingSlots) * mp.RingSlotBytes
			cost := 0.0
			if mp.Streaming() {
				cost = passCost(parts, mp.Pinned, ring)
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
			for u := range parts {
				if !mp.Pinned[u] {
					streamed = append(streamed, u)
					largest = max(largest, iox.AlignUp(parts[u].Room))
				}
			}
			for i, u := range streamed {
				v := streamed[(i+1)%len(streamed)]
				if len(streamed) > 1 {
					pair = max(pair, iox.AlignUp(parts[u].Room)+iox.AlignUp(parts[v].Room))
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
				if alt, ok := planWithPinned(w, r, k); ok && alt < cost {
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
func planWithPinned(w *Weights, req Request, k int) (float64, bool) {
	parts := w.Parts
	if k < 0 || k >= len(parts) {
		return 0, false
	}
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(parts[b].Room, parts[a].Room) })
	pin := make([]bool, len(parts))
	var pinned int64
	for _, u := range order[:k] {
		pin[u] = true
		pinned += BufferBytes(parts[u].Room)
	}
	// What the planner keeps beside the trunk: its floor less the ring.
	floor := Floor(w, req)
	slot0 := BufferBytes(iox.AlignUp(parts[order[0]].Room))
	base := floor - slot0
	slot := iox.AlignUp(parts[order[k]].Room)
	avail := req.Budget - base - pinned
	if avail < BufferBytes(slot) {
		return 0, false
	}
	return passCost(parts, pin, ringFor(parts, pin, slot, avail)), true
}

// TestAutoRows checks the rows the planner chooses when the request leaves
// them open: the resting plan's passes are sized for decoding, the floor
// holds a pass of MinAutoRows (the narrowest wide plan of the floor's
// residency), the widest plan never narrows as the budget grows and
// widens somewhere above the floor, never past what the sessions can
// feed, every plan stays within its budget, and a request's own rows
// (MaxBatch, or Chunk alone) are kept as they are.
func TestAutoRows(t *testing.T) {
	w := oracleWeights(t, "tiny-mxfp4")
	req := Request{MaxContext: 2048, Sessions: 2, Threads: 2}
	floor := Floor(w, req)
	at, err := NewResidency(w, Request{Budget: floor, MaxContext: 2048, Sessions: 2, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rest := at.Plans[0]; rest.Rows != DecodeRows || !rest.AutoRows || rest.Tile != 32 {
		t.Fatalf("at the floor: resting passes of %d rows in tiles of %d (auto %v), want %d in tiles of 32", rest.Rows, rest.Tile, rest.AutoRows, DecodeRows)
	}
	if len(at.Plans) < 2 || at.Plans[1].Rows != MinAutoRows {
		t.Fatalf("at the floor: %d plans, want a wide one of %d rows", len(at.Plans), MinAutoRows)
	}
	if _, err := Plan(w, Request{Budget: floor - 1, MaxContext: 2048, Sessions: 2, Threads: 2}); err == nil {
		t.Fatal("a budget under the floor was planned")
	}
	last, widened := 0, false
	for budget := floor; budget < 4*floor; budget += floor / 16 {
		r := req
		r.Budget = budget
		res, err := NewResidency(w, r)
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		for i, mp := range res.Plans {
			if mp.Total() > budget {
				t.Fatalf("budget %d, plan %d: planned %d", budget, i, mp.Total())
			}
			if i > 0 && mp.Rows <= res.Plans[i-1].Rows {
				t.Fatalf("budget %d: plan %d has %d rows after %d", budget, i, mp.Rows, res.Plans[i-1].Rows)
			}
		}
		widest := res.Plans[len(res.Plans)-1].Rows
		if widest < last || widest > 2*2048 {
			t.Fatalf("budget %d: widest pass %d rows after %d (limit %d)", budget, widest, last, 2*2048)
		}
		widened = widened || widest > MinAutoRows
		last = widest
	}
	if !widened {
		t.Error("the rows never widened above the floor")
	}
	if mp, _ := Plan(w, Request{MaxContext: 2048}); mp.Rows != MaxAutoRowsResident {
		t.Errorf("without a budget: %d rows, want %d", mp.Rows, MaxAutoRowsResident)
	}
	if mp, _ := Plan(w, Request{MaxContext: 64}); mp.Rows != 64 {
		t.Errorf("one session of 64 positions: %d rows, want 64", mp.Rows)
	}
	for _, c := range []struct{ sessions, spec, rows int }{{8, 7, DecodeRows}, {50, 3, 200}, {70, 3, MinAutoRows}} {
		mp, err := Plan(w, Request{Budget: 64 * floor, MaxContext: 256, Sessions: c.sessions, Speculate: c.spec})
		if err != nil || mp.Rows != c.rows {
			t.Errorf("%d sessions verifying %d drafts: resting passes of %v rows (%v), want %d", c.sessions, c.spec, mp, err, c.rows)
		}
	}
	for _, c := range []struct {
		req  Request
		rows int
	}{
		{Request{Budget: 4 * floor, MaxContext: 2048, MaxBatch: 48}, 48},
		{Request{Budget: 4 * floor, MaxContext: 2048, Chunk: 64}, 64},
		{Request{Budget: 4 * floor, MaxContext: 2048, Chunk: 64, MaxBatch: 100}, 100},
	} {
		mp, err := Plan(w, c.req)
		if err != nil || mp.Rows != c.rows || mp.AutoRows {
			t.Errorf("%+v: %v rows (auto %v), err %v; want %d", c.req, mp.Rows, mp.AutoRows, err, c.rows)
		}
		if res, _ := NewResidency(w, c.req); len(res.Plans) != 1 {
			t.Errorf("%+v: %d plans; the request's own rows allow no wider one", c.req, len(res.Plans))
		}
	}
}

// TestPlanCountsSpeculation checks that speculation's rollback buffers (one
// per slot: a copy of the KDA state and the record of its rows) and the
// drafter's tables are counted on the heap and in the floor, and that the
// slots default to one per session.
func TestPlanCountsSpeculation(t *testing.T) {
	w := oracleWeights(t, "tiny-mxfp4")
	fixed, _ := model.StateBytes(w.Cfg)
	base := Request{Sessions: 4, MaxContext: 64}
	plain, err := Plan(w, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ slots, want int }{{0, 4}, {1, 1}, {9, 4}} {
		r := base
		r.Speculate, r.SpecSlots, r.Drafter = 8, c.slots, 1<<20
		mp, err := Plan(w, r)
		if err != nil {
			t.Fatal(err)
		}
		spec := int64(c.want) * (fixed + model.SpecRecordBytes(w.Cfg, 9))
		if mp.SpecSlots != c.want || mp.SpecRows != 9 || mp.Spec != spec || mp.Drafter != 1<<20 {
			t.Fatalf("slots %d: %d slots of %d rows, %d bytes (want %d), drafter %d", c.slots, mp.SpecSlots, mp.SpecRows, mp.Spec, spec, mp.Drafter)
		}
		if d := mp.Heap() - plain.Heap(); d < spec+1<<20 {
			t.Fatalf("slots %d: the heap grew by %d, less than the %d speculation holds", c.slots, d, spec+1<<20)
		}
		r.Budget, base.Budget = 0, 0
		if f, f0 := Floor(w, r), Floor(w, base); f-f0 < spec+1<<20 {
			t.Fatalf("slots %d: the floor grew by %d, less than %d", c.slots, f-f0, spec+1<<20)
		}
	}
}

// TestPlanSpecAutoIsOptional: with SpecAuto, a budget that cannot hold
// speculation gets a plan without it, and the floor is the plain one.
func TestPlanSpecAutoIsOptional(t *testing.T) {
	w := oracleWeights(t, "tiny-mxfp4")
	plain := Request{Sessions: 1, MaxContext: 64}
	auto := plain
	auto.Speculate, auto.SpecSlots, auto.Drafter, auto.SpecAuto = 8, 1, 12<<20, true
	fixed := auto
	fixed.SpecAuto = false
	f0 := Floor(w, plain)
	if f := Floor(w, auto); f != f0 {
		t.Fatalf("auto floor %d, plain %d", f, f0)
	}
	ff := Floor(w, fixed)
	if ff <= f0 {
		t.Fatalf("a fixed draft length's floor %d is not above the plain %d", ff, f0)
	}
	auto.Budget = f0
	mp, err := Plan(w, auto)
	if err != nil || mp.SpecSlots != 0 || mp.Spec != 0 {
		t.Fatalf("auto at the plain floor: %v, %d slots", err, mp.SpecSlots)
	}
	auto.Budget = ff
	if mp, err := Plan(w, auto); err != nil || mp.SpecSlots != 1 {
		t.Fatalf("auto with room: %v, %+v", err, mp)
	}
	fixed.Budget = f0
	if _, err := Plan(w, fixed); err == nil {
		t.Fatal("a fixed draft length fits below its floor")
	}
}
