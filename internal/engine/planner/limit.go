package planner

import (
	"math"
	"runtime/debug"
	"sync"
)

// The Go runtime's memory limit is the process's: every Model opened with
// a budget claims the share of its budget that is neither off-heap
// buffers nor the executable, and the limit is the sum of the open claims
// (or the limit that was set before the first claim, GOMEMLIMIT or
// debug.SetMemoryLimit, if that is lower). The collector then keeps the
// heap, its garbage and the runtime's own memory inside the budget; with
// no claim left the earlier limit is restored.
//
// The claims are process-wide state (the runtime's limit is), so this is
// the one package-level variable of the engine: every Model in the process
// shares it.
var memLimit struct {
	sync.Mutex
	base   int64
	claims map[*LimitClaim]struct{}
}

// LimitClaim is one Model's share of the memory limit.
type LimitClaim struct{ n int64 }

// ClaimMemoryLimit adds a claim of n bytes (n ≤ 0: no claim, nil).
func ClaimMemoryLimit(n int64) *LimitClaim {
	if n <= 0 {
		return nil
	}
	memLimit.Lock()
	defer memLimit.Unlock()
	if len(memLimit.claims) == 0 {
		memLimit.base = debug.SetMemoryLimit(-1)
		memLimit.claims = make(map[*LimitClaim]struct{})
	}
	c := &LimitClaim{n: n}
	memLimit.claims[c] = struct{}{}
	applyMemoryLimitLocked()
	return c
}

// Set changes the claim to n bytes.
func (c *LimitClaim) Set(n int64) {
	if c == nil {
		return
	}
	memLimit.Lock()
	defer memLimit.Unlock()
	if _, ok := memLimit.claims[c]; ok {
		c.n = max(n, 1)
		applyMemoryLimitLocked()
	}
}

// Release withdraws the claim; it is safe to call more than once, and on
// nil.
func (c *LimitClaim) Release() {
	if c == nil {
		return
	}
	memLimit.Lock()
	defer memLimit.Unlock()
	if _, ok := memLimit.claims[c]; !ok {
		return
	}
	delete(memLimit.claims, c)
	if len(memLimit.claims) == 0 {
		debug.SetMemoryLimit(memLimit.base)
		return
	}
	applyMemoryLimitLocked()
}

func applyMemoryLimitLocked() {
	var sum int64
	for c := range memLimit.claims {
		sum += c.n
		if sum < 0 {
			sum = math.MaxInt64
		}
	}
	debug.SetMemoryLimit(min(sum, memLimit.base))
}
