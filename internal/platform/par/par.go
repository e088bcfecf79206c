// Package par is k3's worker pool: a fixed set of goroutines that run the
// row blocks of the kernels. It defines the two interfaces the kernels
// dispatch through, RangeJob and Runner (tensor declares the same ones), so that
// the pool depends on nothing above it.
//
// Several goroutines (one per session) may call Run concurrently on one
// Pool; their chunks interleave on the shared workers. Run allocates nothing
// in steady state.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/k3go/k3/internal/platform/crash"
)

// RangeJob is a unit of parallel work over an index range, typically a block
// of output rows. Range must be safe to call concurrently for disjoint
// ranges. It is an interface literal, not a defined type, so that the
// packages above (tensor) declare the same type without importing this one,
// and a Pool satisfies their Runner.
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

var _ Runner = (*Pool)(nil)

// Pool runs RangeJob chunks on a fixed number of goroutines.
type Pool struct {
	threads int
	work    chan *batch
	closed  atomic.Bool
	wg      sync.WaitGroup
}

type batch struct {
	job     RangeJob
	n       int
	grain   int
	next    atomic.Int64
	helpers sync.WaitGroup
	// panicked holds the first panic of a worker's chunk, re-raised on
	// the goroutine that called Run.
	panicked atomic.Pointer[crash.Error]
}

var batches = sync.Pool{New: func() any { return new(batch) }}

// New starts a pool of threads goroutines in total, counting the caller of
// Run as one. threads <= 0 means GOMAXPROCS.
func New(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, work: make(chan *batch, 4*threads)}
	for i := 1; i < threads; i++ {
		p.wg.Add(1)
		go p.worker()
	}
	return p
}

// Threads returns the number of goroutines that share the work, the caller
// included.
func (p *Pool) Threads() int { return p.threads }

func (p *Pool) worker() {
	defer p.wg.Done()
	for b := range p.work {
		b.help()
	}
}

// help drains b on a worker. A panic in a chunk is caught and handed to
// the caller of Run (which re-raises it, with this goroutine's stack), so
// that a bug in a kernel fails the work that ran it instead of killing the
// process; the worker goes on serving.
func (b *batch) help() {
	defer b.helpers.Done()
	defer func() {
		if p := recover(); p != nil {
			b.panicked.CompareAndSwap(nil, crash.New("a kernel worker", p).(*crash.Error))
		}
	}()
	b.drain()
}

// drain runs chunks until none is left.
func (b *batch) drain() {
	for {
		lo := int(b.next.Add(int64(b.grain))) - b.grain
		if lo >= b.n {
			return
		}
		hi := min(lo+b.grain, b.n)
		b.job.Range(lo, hi)
	}
}

// Run implements Runner: it splits [0, n) into chunks of grain and
// runs them on the pool and the calling goroutine, returning when all are
// done. After Close it runs everything on the caller. A chunk that panics
// on a worker panics Run's caller, with a *crash.Error holding the
// worker's stack.
func (p *Pool) Run(n, grain int, job RangeJob) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := (n + grain - 1) / grain
	if p == nil || p.threads <= 1 || chunks <= 1 || p.closed.Load() {
		job.Range(0, n)
		return
	}
	b := batches.Get().(*batch)
	b.job, b.n, b.grain = job, n, grain
	b.next.Store(0)
	helpers := min(p.threads-1, chunks-1)
	for i := 0; i < helpers; i++ {
		b.helpers.Add(1)
		select {
		case p.work <- b:
		default: // every worker is busy and the queue is full: do it ourselves
			b.helpers.Done()
		}
	}
	b.drain()
	// Wait until every worker that took b has left it, so b can be reused.
	b.helpers.Wait()
	b.job = nil
	if e := b.panicked.Swap(nil); e != nil {
		batches.Put(b)
		panic(e)
	}
	batches.Put(b)
}

// Close stops the workers once queued work is done. Run still works after
// Close, serially. Close must not be called concurrently with Run.
func (p *Pool) Close() {
	if p == nil || p.closed.Swap(true) {
		return
	}
	close(p.work)
	p.wg.Wait()
}

// For is a convenience over Run for code off the hot path: it runs fn over
// [0, n) in chunks of grain. It allocates a closure per call.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	p.Run(n, grain, rangeFunc(fn))
}

type rangeFunc func(lo, hi int)

func (f rangeFunc) Range(lo, hi int) { f(lo, hi) }
