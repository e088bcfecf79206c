package k3

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestMemoryLimitClaims checks that the Go memory limit is the sum of the
// open claims, never above a limit set before the first, and is restored
// when the last is released.
func TestMemoryLimitClaims(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	limit := func() int64 { return debug.SetMemoryLimit(-1) }

	debug.SetMemoryLimit(math.MaxInt64)
	a := claimMemoryLimit(100 << 20)
	if got := limit(); got != 100<<20 {
		t.Fatalf("one claim of 100 MiB: limit %d", got)
	}
	b := claimMemoryLimit(50 << 20)
	if got := limit(); got != 150<<20 {
		t.Fatalf("claims of 100 and 50 MiB: limit %d", got)
	}
	a.set(10 << 20)
	if got := limit(); got != 60<<20 {
		t.Fatalf("claims of 10 and 50 MiB: limit %d", got)
	}
	a.release()
	a.release() // a second release changes nothing
	if got := limit(); got != 50<<20 {
		t.Fatalf("one claim of 50 MiB left: limit %d", got)
	}
	b.release()
	if got := limit(); got != math.MaxInt64 {
		t.Fatalf("no claim: limit %d, want the earlier one restored", got)
	}
	var none *limitClaim // no budget: no claim, and its methods do nothing
	none.set(1)
	none.release()

	// A lower limit set before the first claim wins.
	debug.SetMemoryLimit(30 << 20)
	c := claimMemoryLimit(100 << 20)
	if got := limit(); got != 30<<20 {
		t.Fatalf("a 100 MiB claim under a 30 MiB limit: limit %d", got)
	}
	c.release()
	if got := limit(); got != 30<<20 {
		t.Fatalf("after the claim: limit %d, want 30 MiB", got)
	}
}

// TestOpenSetsMemoryLimit checks that a budgeted Open leaves the Go
// runtime's limit at the plan's heap share, under the budget, and that
// Close restores the earlier one.
func TestOpenSetsMemoryLimit(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	before := debug.SetMemoryLimit(-1)
	m, err := Open(dir, Options{RAMBudget: 80e6, MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	got, want := debug.SetMemoryLimit(-1), m.e.mem.HeapLimit()
	heap := m.e.mem.Heap()
	m.Close()
	if got != want || want < heap || want >= 80e6 {
		t.Fatalf("limit %d while open, want the plan's %d (≥ its heap %d, < the budget)", got, want, heap)
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Fatalf("limit %d after Close, want %d", after, before)
	}
}
