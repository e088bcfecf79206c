package tensor

// RangeJob is a unit of parallel work over an index range, typically a block
// of output rows. Range must be safe to call concurrently for disjoint
// ranges. It is an interface literal, not a defined type, so that a
// worker pool written anywhere (k3's own, internal/platform/par, declares
// the same literal) satisfies Runner without importing this package.
type RangeJob = interface {
	Range(lo, hi int)
}

// Runner runs job.Range over [0, n) split into chunks of at most grain
// indices, possibly on several goroutines, and returns when every chunk is
// done. Results must not depend on how the range is split: every kernel in
// k3 computes each output index entirely inside one chunk.
//
// A nil Runner means: run on the calling goroutine.
type Runner interface {
	Run(n, grain int, job RangeJob)
}

// run dispatches job over [0, n) with r, or serially when r is nil.
func run(r Runner, n, grain int, job RangeJob) {
	if n <= 0 {
		return
	}
	if r == nil || n <= grain {
		job.Range(0, n)
		return
	}
	r.Run(n, grain, job)
}

// Run is the exported form of the dispatch used by the kernels, for other
// packages' kernels (quant) that follow the same rules.
func Run(r Runner, n, grain int, job RangeJob) { run(r, n, grain, job) }

// RowGrain returns how many rows of a matrix with rowBytes bytes per row
// make one chunk of parallel work: about 256 KiB of weights, so that a chunk
// runs for tens of microseconds (assembly cannot be preempted, so chunks
// must stay short) yet amortises the scheduling cost.
func RowGrain(rowBytes, tokens int) int {
	if tokens < 1 {
		tokens = 1
	}
	const target = 256 << 10
	work := rowBytes * (1 + tokens/8)
	if work <= 0 {
		return 1
	}
	g := target / work
	if g < 1 {
		g = 1
	}
	return g
}
