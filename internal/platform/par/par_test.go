package par

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/k3go/k3/internal/platform/crash"
)

type countJob struct {
	hits []atomic.Int32
}

func (j *countJob) Range(lo, hi int) {
	for i := lo; i < hi; i++ {
		j.hits[i].Add(1)
	}
}

func TestRunCoversEveryIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := New(threads)
		for _, n := range []int{0, 1, 7, 64, 1000} {
			for _, grain := range []int{1, 3, 64, 5000} {
				j := &countJob{hits: make([]atomic.Int32, n)}
				p.Run(n, grain, j)
				for i := range j.hits {
					if got := j.hits[i].Load(); got != 1 {
						t.Fatalf("threads=%d n=%d grain=%d: index %d ran %d times", threads, n, grain, i, got)
					}
				}
			}
		}
		p.Close()
	}
}

func TestConcurrentCallers(t *testing.T) {
	p := New(4)
	defer p.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for it := 0; it < 200; it++ {
				j := &countJob{hits: make([]atomic.Int32, 257)}
				p.Run(257, 5, j)
				for i := range j.hits {
					if j.hits[i].Load() != 1 {
						t.Errorf("index %d ran %d times", i, j.hits[i].Load())
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestRunAfterClose(t *testing.T) {
	p := New(3)
	p.Close()
	j := &countJob{hits: make([]atomic.Int32, 10)}
	p.Run(10, 1, j)
	for i := range j.hits {
		if j.hits[i].Load() != 1 {
			t.Fatalf("index %d ran %d times after Close", i, j.hits[i].Load())
		}
	}
}

func TestRunAllocatesNothing(t *testing.T) {
	p := New(2)
	defer p.Close()
	j := &countJob{hits: make([]atomic.Int32, 100)}
	allocs := testing.AllocsPerRun(100, func() { p.Run(100, 10, j) })
	if allocs != 0 {
		t.Fatalf("Run allocated %.1f times per call", allocs)
	}
}

// pairPanic has two chunks that wait for each other, so that both run at
// once (one on the caller, one on a worker); chunk at panics.
type pairPanic struct {
	at      int
	arrived sync.WaitGroup
}

func (j *pairPanic) Range(lo, hi int) {
	j.arrived.Done()
	j.arrived.Wait()
	if lo == j.at {
		panic(fmt.Sprintf("chunk %d", j.at))
	}
}

// TestWorkerPanic checks that a chunk panicking on a worker comes back as
// a *crash.Error panic on the caller of Run, with the worker's stack, and
// that the pool keeps working afterwards. The panicking chunk alternates,
// so that it runs on the worker in some rounds whichever goroutine takes
// which chunk.
func TestWorkerPanic(t *testing.T) {
	p := New(2)
	defer p.Close()
	fromWorker := 0
	for round := range 20 {
		j := &pairPanic{at: round % 2}
		j.arrived.Add(2)
		got := func() (v any) {
			defer func() { v = recover() }()
			p.Run(2, 1, j)
			return nil
		}()
		want := fmt.Sprintf("chunk %d", j.at)
		switch e := got.(type) {
		case *crash.Error:
			if !errors.Is(e, crash.ErrInternal) || len(e.Stack) == 0 || e.Value != want {
				t.Fatalf("round %d: %v (stack %d bytes)", round, e, len(e.Stack))
			}
			fromWorker++
		case string:
			if e != want { // the caller's own chunk panics as it is
				t.Fatalf("round %d: Run panicked with %q", round, e)
			}
		default:
			t.Fatalf("round %d: Run returned %v, want a panic", round, got)
		}
	}
	if fromWorker == 0 {
		t.Fatal("no round had the panicking chunk on the worker")
	}
	var sum atomic.Int64
	p.For(1000, 7, func(lo, hi int) { sum.Add(int64(hi - lo)) })
	if sum.Load() != 1000 {
		t.Fatalf("after panics the pool ran %d of 1000 indices", sum.Load())
	}
}
