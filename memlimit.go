package k3

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tokenizer"
)

// budgetRequest is the one place where Options become the memory planner's
// request: Open plans with it, Inspect (and so k3 doctor, k3 plan and the
// floor every command reports) plans with it, so that the floor is the
// same number everywhere. dir is the checkpoint directory (for the
// tokenizer's files).
func budgetRequest(dir string, opts Options) model.BudgetRequest {
	if opts.MaxContext == 0 {
		opts.MaxContext = defaultMaxContext
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return model.BudgetRequest{
		Budget: opts.RAMBudget, Sessions: opts.Sessions, MaxContext: opts.MaxContext,
		Chunk: opts.PrefillChunk, MaxBatch: opts.MaxBatch, Speculate: opts.Speculate,
		Threads: threads, IOQueueDepth: opts.IOQueueDepth,
		Executable: rss.ExecutableBytes(),
		Tokenizer:  tokenizerBytes(dir, opts.TokenizerDir),
	}
}

// tokenizerBytes estimates the heap the tokenizer's tables take, from the
// size of its files: 3.2 times their bytes plus 0.3 MB measured for the
// 200k-rank fixture and the quickstart's small one; 4 times plus 1 MiB
// here. Zero when the model will have no tokenizer (the same rule as
// loadTokenizer).
func tokenizerBytes(ckptDir, dir string) int64 {
	if dir == "" {
		dir = ckptDir
	}
	var n int64
	for _, f := range []string{tokenizer.ModelFile, tokenizer.ConfigFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += st.Size()
		} else if f == tokenizer.ModelFile {
			return 0
		}
	}
	return 4*n + 1<<20
}

// The Go runtime's memory limit is the process's: every Model opened with
// a budget claims the share of its budget that is neither off-heap
// buffers nor the executable, and the limit is the sum of the open claims
// (or the limit that was set before the first claim, GOMEMLIMIT or
// debug.SetMemoryLimit, if that is lower). The collector then keeps the
// heap, its garbage and the runtime's own memory inside the budget; with
// no claim left the earlier limit is restored.
var memLimit struct {
	sync.Mutex
	base   int64
	claims map[*limitClaim]struct{}
}

// limitClaim is one Model's share of the memory limit.
type limitClaim struct{ n int64 }

// claimMemoryLimit adds a claim of n bytes (n ≤ 0: no claim, nil).
func claimMemoryLimit(n int64) *limitClaim {
	if n <= 0 {
		return nil
	}
	memLimit.Lock()
	defer memLimit.Unlock()
	if len(memLimit.claims) == 0 {
		memLimit.base = debug.SetMemoryLimit(-1)
		memLimit.claims = make(map[*limitClaim]struct{})
	}
	c := &limitClaim{n: n}
	memLimit.claims[c] = struct{}{}
	applyMemoryLimitLocked()
	return c
}

// set changes the claim to n bytes.
func (c *limitClaim) set(n int64) {
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

// release withdraws the claim; it is safe to call more than once.
func (c *limitClaim) release() {
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
