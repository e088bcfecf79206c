package cache

import (
	"math"
	"testing"
)

func TestLogAdd(t *testing.T) {
	for _, c := range [][3]float64{{math.Inf(-1), 3, 3}, {0, 0, 1}, {2, 2, 3}, {10, 0, 10 + math.Log2(1+math.Exp2(-10))}} {
		if got := logAdd(c[0], c[1]); math.Abs(got-c[2]) > 1e-12 {
			t.Errorf("logAdd(%v, %v) = %v, want %v", c[0], c[1], got, c[2])
		}
	}
}

// TestCycleClock: a cycle is a jump back over more than half the layer
// range seen, not any decrease.
func TestCycleClock(t *testing.T) {
	var p wlfu
	p.reset(4, 8, 0)
	for _, l := range []int32{1, 2, 3, 2, 3, 4, 5, 6, 5, 1, 2, 6, 3} {
		p.clock(Key{Layer: l})
	}
	if p.cycle != 2 || p.run != 13 {
		t.Errorf("cycle %d run %d, want 2 and 13", p.cycle, p.run)
	}
}
