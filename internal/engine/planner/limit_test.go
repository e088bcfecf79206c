package planner

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestMemoryLimitClaims checks that the Go memory limit is the sum of the
// open claims, never above a limit set before the first, and is restored
// when the last is released.
func TestMemoryLimitClaims(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	limit := func() int64 { return debug.SetMemoryLimit(-1) }

	debug.SetMemoryLimit(math.MaxInt64)
	a := ClaimMemoryLimit(100 << 20)
	if got := limit(); got != 100<<20 {
		t.Fatalf("one claim of 100 MiB: limit %d", got)
	}
	b := ClaimMemoryLimit(50 << 20)
	if got := limit(); got != 150<<20 {
		t.Fatalf("claims of 100 and 50 MiB: limit %d", got)
	}
	a.Set(10 << 20)
	if got := limit(); got != 60<<20 {
		t.Fatalf("claims of 10 and 50 MiB: limit %d", got)
	}
	a.Release()
	a.Release() // a second release changes nothing
	if got := limit(); got != 50<<20 {
		t.Fatalf("one claim of 50 MiB left: limit %d", got)
	}
	b.Release()
	if got := limit(); got != math.MaxInt64 {
		t.Fatalf("no claim: limit %d, want the earlier one restored", got)
	}
	var none *LimitClaim // no budget: no claim, and its methods do nothing
	none.Set(1)
	none.Release()

	// A lower limit set before the first claim wins.
	debug.SetMemoryLimit(30 << 20)
	c := ClaimMemoryLimit(100 << 20)
	if got := limit(); got != 30<<20 {
		t.Fatalf("a 100 MiB claim under a 30 MiB limit: limit %d", got)
	}
	c.Release()
	if got := limit(); got != 30<<20 {
		t.Fatalf("after the claim: limit %d, want 30 MiB", got)
	}
}
