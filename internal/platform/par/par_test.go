package par

import (
	"sync"
	"sync/atomic"
	"testing"
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
