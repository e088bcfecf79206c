package trunk

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/oracle"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// loadPlanned loads an oracle with its trunk planned for the given budget
// (0: everything pinned) and read through read (nil: the checkpoint).
func loadPlanned(t *testing.T, name string, budget int64, threads int, read ReadFunc) (*model.Model, *Trunk, *planner.MemoryPlan, error) {
	t.Helper()
	p, _ := oracle.Open(t, name)
	lay := NewLayout(p)
	mp, err := planner.Plan(lay.Weights(), planner.Request{Budget: budget, MaxContext: 64, Chunk: 64})
	if err != nil {
		return nil, nil, nil, err
	}
	pool := par.New(threads)
	t.Cleanup(pool.Close)
	if read == nil {
		read = oracle.Read(p)
	}
	tr, err := New(context.Background(), lay, mp, read, nil)
	if err != nil {
		return nil, nil, mp, err
	}
	t.Cleanup(tr.Close)
	m, err := model.Load(context.Background(), p, read, model.Options{Pool: pool, Layers: tr})
	if err != nil {
		return nil, nil, mp, err
	}
	t.Cleanup(m.Close)
	return m, tr, mp, nil
}

// TestBudgetInvariance checks that every budget, from the smallest the
// planner accepts to everything resident, with 1 and 3 threads, gives
// bit-identical logits, and that small budgets really stream.
func TestBudgetInvariance(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			ref, exp := oracle.Load(t, name, model.Options{})
			want := oracle.Teacher(t, ref, exp.FullIDs)
			lo := smallestBudget(t, ref.Plan)
			full, _ := planner.Plan(NewLayout(ref.Plan).Weights(), planner.Request{Budget: 1 << 40, MaxContext: 64, Chunk: 64})
			budgets := []int64{lo, lo + (full.Total()-lo)/3, lo + 2*(full.Total()-lo)/3, 1 << 40, 0}
			for _, b := range budgets {
				for _, threads := range []int{1, 3} {
					m, tr, mp, err := loadPlanned(t, name, b, threads, nil)
					if err != nil {
						t.Fatalf("budget %d: %v", b, err)
					}
					if b == lo && !mp.Streaming() {
						t.Fatalf("smallest budget %d pins everything: %s", b, mp)
					}
					if b > 0 && mp.Total() > b {
						t.Fatalf("plan %d exceeds budget %d", mp.Total(), b)
					}
					// Twice, so the ring wraps around between passes.
					for rep := 0; rep < 2; rep++ {
						got := oracle.Teacher(t, m, exp.FullIDs)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("budget %d threads %d rep %d: logit %d = %v, want %v\n%s", b, threads, rep, i, got[i], want[i], mp)
							}
						}
					}
					if mp.Streaming() && tr.Stats().StreamedAcquires == 0 {
						t.Fatalf("budget %d: streaming plan but no streamed acquires", b)
					}
					if mp.Streaming() && pairFits(tr) && tr.Stats().LoadsAhead == 0 {
						t.Fatalf("budget %d: two consecutive streamed parts fit in the ring (%d bytes) but no load started while another part was placed", b, len(tr.arena))
					}
				}
			}
		})
	}
}

// pairFits reports whether some two streamed parts, consecutive in pass
// order, fit in the ring together.
func pairFits(tr *Trunk) bool {
	for i, u := range tr.order {
		v := tr.order[(i+1)%len(tr.order)]
		if u != v && tr.room(u)+tr.room(v) <= int64(len(tr.arena)) {
			return true
		}
	}
	return false
}

// smallestBudget finds the smallest budget the planner accepts.
func smallestBudget(t *testing.T, p *model.Plan) int64 {
	w := NewLayout(p).Weights()
	lo, hi := int64(1), int64(1<<30)
	for lo < hi {
		mid := (lo + hi) / 2
		if _, err := planner.Plan(w, planner.Request{Budget: mid, MaxContext: 64, Chunk: 64}); err == nil {
			hi = mid
		} else if !errors.Is(err, planner.ErrBudget) {
			t.Fatal(err)
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// TestTrunkReadError checks that a failing read fails the step with the
// error, and that the model keeps working once reads succeed again.
func TestTrunkReadError(t *testing.T) {
	var fail atomic.Bool
	base, exp := oracle.Load(t, "tiny-mxfp4", model.Options{})
	plain := oracle.Read(base.Plan)
	read := func(ctx context.Context, e Extent, buf []byte) error {
		if fail.Load() {
			return errors.New("injected EIO")
		}
		return plain(ctx, e, buf)
	}
	want := oracle.Teacher(t, base, exp.FullIDs)
	m, _, mp, err := loadPlanned(t, "tiny-mxfp4", smallestBudget(t, base.Plan), 2, read)
	if err != nil {
		t.Fatal(err)
	}
	if !mp.Streaming() {
		t.Fatal("the smallest budget does not stream")
	}
	fail.Store(true)
	s := m.NewSession(64)
	out := make([]float32, m.Cfg.Vocab)
	err = s.Forward(context.Background(), exp.FullIDs, out, false)
	if err == nil || !strings.Contains(err.Error(), "injected EIO") {
		t.Fatalf("got %v, want the injected error", err)
	}
	fail.Store(false)
	got := oracle.Teacher(t, m, exp.FullIDs)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after recovery: logit %d differs", i)
		}
	}
}

// TestStreamedBatchesAndRollback runs the model's batch and rollback
// checks with the trunk streamed at the smallest budget: sub-passes of one
// ForwardBatch take turns on the ring, and a rolled-back pass leaves no
// trace in what the ring serves next.
func TestStreamedBatchesAndRollback(t *testing.T) {
	for _, name := range oracle.Names {
		t.Run(name, func(t *testing.T) {
			ref, _ := oracle.Load(t, name, model.Options{})
			V := ref.Cfg.Vocab
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			seqs := make([][]int, 6)
			want := make([][]float32, len(seqs))
			for i := range seqs {
				seqs[i] = make([]int, 5+rng.IntN(30))
				for j := range seqs[i] {
					seqs[i][j] = rng.IntN(V)
				}
				want[i] = oracle.Teacher(t, ref, seqs[i])
			}
			long := append(append([]int(nil), seqs[0]...), seqs[1]...)[:40]
			wantLong := oracle.Teacher(t, ref, long)
			for _, threads := range []int{1, 3} {
				m, _, mp, err := loadPlanned(t, name, smallestBudget(t, ref.Plan), threads, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !mp.Streaming() {
					t.Fatal("the smallest budget does not stream")
				}
				for _, shape := range [][2]int{{3, 0}, {64, 0}, {64, 5}, {7, 2}} {
					oracle.CheckRandomBatches(t, m, rng, seqs, want, shape[0], shape[1])
				}
				oracle.CheckRollback(t, m, rng, long, wantLong)
			}
		})
	}
}

// TestReplan moves one trunk through plans of different budgets between
// passes (everything pinned, streaming, the smallest, pinned again, with
// the ring's reads of the next pass in flight at each move): the logits
// stay bit-identical, parts pinned in both plans are not read again, parts
// pinned anew are read once, and every buffer the trunk took is given back
// once, before the new plan's are taken.
func TestReplan(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			ref, exp := oracle.Load(t, name, model.Options{})
			want := oracle.Teacher(t, ref, exp.FullIDs)
			lay := NewLayout(ref.Plan)
			w := lay.Weights()
			lo := smallestBudget(t, ref.Plan)
			full, _ := planner.Plan(w, planner.Request{Budget: 1 << 40, MaxContext: 64, Chunk: 64})
			plan := func(b int64) *planner.MemoryPlan {
				mp, err := planner.Plan(w, planner.Request{Budget: b, MaxContext: 64, Chunk: 64})
				if err != nil {
					t.Fatal(err)
				}
				return mp
			}
			// Buffers by first byte's address: taken and given back.
			held := map[*byte]int{}
			var live, peak int64
			alloc := func(n int64) ([]byte, error) {
				b := make([]byte, n)
				held[&b[0]]++
				live += n
				peak = max(peak, live)
				return b, nil
			}
			free := func(b []byte) {
				if held[&b[0]] != 1 {
					t.Fatalf("a buffer of %d bytes given back %d times before", len(b), 1-held[&b[0]])
				}
				held[&b[0]]--
				live -= int64(len(b))
			}
			p, _ := oracle.Open(t, name)
			pool := par.New(2)
			t.Cleanup(pool.Close)
			mp := plan(1 << 40)
			tr, err := New(context.Background(), NewLayout(p), mp, oracle.Read(p), alloc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tr.Close)
			m, err := model.Load(context.Background(), p, oracle.Read(p), model.Options{Pool: pool, Layers: tr})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			check := func(step string) {
				got := oracle.Teacher(t, m, exp.FullIDs)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: logit %d = %v, want %v", step, i, got[i], want[i])
					}
				}
			}
			check("all pinned")
			for _, b := range []int64{lo + (full.Total()-lo)/2, lo, full.Total(), lo} {
				next := plan(b)
				st := tr.Stats()
				var repin, parts int64
				for u := range next.Pinned {
					if next.Pinned[u] && !mp.Pinned[u] {
						repin += w.Parts[u].Read
						parts++
					}
				}
				if err := tr.Replan(context.Background(), next, alloc, free); err != nil {
					t.Fatal(err)
				}
				// Direct reads round each extent out to aligned windows.
				if got := tr.Stats().ReloadedBytes - st.ReloadedBytes; got < repin || got > repin+parts*16*iox.Align {
					t.Fatalf("to budget %d: %d bytes read again to pin %d parts of %d bytes", b, got, parts, repin)
				}
				if want := next.PinnedBytes + int64(next.RingSlots)*next.RingSlotBytes; live != want {
					t.Fatalf("to budget %d: %d bytes held after the move, the plan has %d", b, live, want)
				}
				mp = next
				check("budget " + planner.Human(b))
				if mp.Streaming() && tr.Stats().StreamedAcquires == st.StreamedAcquires {
					t.Fatalf("budget %d: streaming plan but no streamed acquires", b)
				}
			}
			if peak > full.PinnedBytes+int64(full.RingSlots)*full.RingSlotBytes {
				t.Fatalf("the trunk held %d bytes at once, more than its largest plan's %d", peak, full.PinnedBytes)
			}
		})
	}
}
