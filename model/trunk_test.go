package model

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3go/k3/internal/platform/par"
)

// loadPlanned loads an oracle with a memory plan for the given budget.
func loadPlanned(t *testing.T, name string, budget int64, threads int, read ReadFunc) (*Model, *MemoryPlan, error) {
	t.Helper()
	base, _ := loadOracle(t, name)
	p := base.Plan
	mp, err := p.PlanMemory(BudgetRequest{Budget: budget, MaxContext: 64, Chunk: 64})
	if err != nil {
		return nil, nil, err
	}
	pool := par.New(threads)
	t.Cleanup(pool.Close)
	if read == nil {
		read = func(ctx context.Context, e Extent, buf []byte) error {
			return p.Ckpt.ReadRange(e.File, e.Off, buf[e.BufOff:e.BufOff+e.Size])
		}
	}
	m, err := Load(context.Background(), p, read, Options{Pool: pool, Memory: mp})
	if err != nil {
		return nil, mp, err
	}
	t.Cleanup(m.Close)
	return m, mp, nil
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

// TestBudgetInvariance checks that every budget, from the smallest the
// planner accepts to everything resident, with 1 and 3 threads, gives
// bit-identical logits, and that small budgets really stream.
func TestBudgetInvariance(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			ref, exp := loadOracle(t, name)
			want := teacherLogits(t, ref, exp.FullIDs)
			lo := smallestBudget(t, ref.Plan)
			full, _ := ref.Plan.PlanMemory(BudgetRequest{Budget: 1 << 40, MaxContext: 64, Chunk: 64})
			budgets := []int64{lo, lo + (full.Total()-lo)/3, lo + 2*(full.Total()-lo)/3, 1 << 40, 0}
			for _, b := range budgets {
				for _, threads := range []int{1, 3} {
					m, mp, err := loadPlanned(t, name, b, threads, nil)
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
						got := teacherLogits(t, m, exp.FullIDs)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("budget %d threads %d rep %d: logit %d = %v, want %v\n%s", b, threads, rep, i, got[i], want[i], mp)
							}
						}
					}
					if tr := m.Trunk(); tr != nil && mp.Streaming() && tr.Stats().StreamedAcquires == 0 {
						t.Fatalf("budget %d: streaming plan but no streamed acquires", b)
					}
					if tr := m.Trunk(); tr != nil && mp.Streaming() && pairFits(tr) && tr.Stats().LoadsAhead == 0 {
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
func smallestBudget(t *testing.T, p *Plan) int64 {
	lo, hi := int64(1), int64(1<<30)
	for lo < hi {
		mid := (lo + hi) / 2
		if _, err := p.PlanMemory(BudgetRequest{Budget: mid, MaxContext: 64, Chunk: 64}); err == nil {
			hi = mid
		} else if !errors.Is(err, ErrBudget) {
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
	var p *Plan
	read := func(ctx context.Context, e Extent, buf []byte) error {
		if fail.Load() {
			return errors.New("injected EIO")
		}
		return p.Ckpt.ReadRange(e.File, e.Off, buf[e.BufOff:e.BufOff+e.Size])
	}
	base, exp := loadOracle(t, "tiny-mxfp4")
	p = base.Plan
	want := teacherLogits(t, base, exp.FullIDs)
	m, mp, err := loadPlanned(t, "tiny-mxfp4", smallestBudget(t, p), 2, read)
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
	got := teacherLogits(t, m, exp.FullIDs)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after recovery: logit %d differs", i)
		}
	}
}
