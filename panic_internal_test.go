package k3

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/k3go/k3/internal/platform/crash"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
)

// panicSource panics once, on the first read that touches [lo, hi) while
// armed: a bug in the I/O path, on the reader's goroutine.
type panicSource struct {
	iox.Source
	armed, fired atomic.Bool
	lo, hi       int64
}

func (p *panicSource) ReadAt(b []byte, off int64) (int, error) {
	if p.armed.Load() && off < p.hi && off+int64(len(b)) > p.lo && p.fired.CompareAndSwap(false, true) {
		panic("injected panic in a read")
	}
	return p.Source.ReadAt(b, off)
}

// TestEnginePanicIsAnError checks that a panic on one of the engine's
// goroutines (here the I/O reader's, while the trunk streams or an expert
// loads) fails the step with an error wrapping crash.ErrInternal that
// carries the panic's stack, and kills nothing: the session recovers with
// Reset and gives the logits of a clean model, and other sessions go on.
func TestEnginePanicIsAnError(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ref, err := Open(dir, Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{1, 2, 3, 4}
	want, err := ref.NewSession().Logits(context.Background(), ids)
	ref.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		lo, hi int64
	}{
		{"every read", 0, 1 << 40},
		// Layer 1's routed experts (see TestInjectedReadFaults).
		{"an expert read", 531_776, 584_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			var src *panicSource
			wrap := func(path string, f *iox.File) iox.Source {
				src = &panicSource{Source: f, lo: c.lo, hi: c.hi}
				return src
			}
			m, err := Open(dir, Options{RAMBudget: 56e6, MaxContext: 64, Sessions: 2, wrapSource: wrap})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			s := m.NewSession()
			src.armed.Store(true)
			_, err = s.Logits(ctx, ids)
			if !src.fired.Load() {
				t.Fatal("no read touched the range")
			}
			if !errors.Is(err, ErrInternal) || len(crash.Stack(err)) == 0 {
				t.Fatalf("a panicking read gave %v, want an internal error with a stack", err)
			}
			s.Reset()
			got, err := s.Logits(ctx, ids)
			if err != nil {
				t.Fatalf("after Reset: %v", err)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("after the panic, logit %d = %v, want %v", i, got[i], want[i])
				}
			}
			other, err := m.NewSession().Logits(ctx, ids)
			if err != nil || other[0] != want[0] {
				t.Fatalf("another session after the panic: %v", err)
			}
		})
	}
}
