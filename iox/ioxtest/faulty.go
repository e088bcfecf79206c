package ioxtest

import (
	"cmp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/k3go/k3/iox"
)

// Kind is what a [Fault] does to a matching read.
type Kind int

const (
	// Short returns fewer bytes than asked (Fault.N) with a nil error, as a
	// pread may; this deliberately breaks the io.ReaderAt contract.
	Short Kind = iota + 1
	// Fail returns Fault.Err (default syscall.EIO) and no bytes. Use
	// syscall.EINTR or syscall.EAGAIN for retryable failures.
	Fail
	// Delay sleeps Fault.Delay, then reads normally.
	Delay
	// Hang blocks until Fault.Until is closed or [FaultySource.Release] is
	// called, then returns Fault.Err if set or reads normally: a device
	// that stops answering.
	Hang
)

// Fault describes one injected fault. A read matches when its byte range
// overlaps [Off, End) (End == 0: no upper bound) and, if Call > 0, it is the
// Call-th ReadAt on the source (1-based). The first matching fault that has
// not used up Times fires; Times == 0 means unlimited.
type Fault struct {
	Kind  Kind
	Off   int64
	End   int64
	Call  int
	Times int

	N     int             // Short: bytes returned; 0 means half the request (at least 1)
	Err   error           // Fail: the error (default syscall.EIO); Hang: returned after release
	Delay time.Duration   // Delay: how long
	Until <-chan struct{} // Hang: released when closed (nil: only by Release)
}

type armed struct {
	Fault
	fired int
}

func (a *armed) matches(call int, off int64, n int) bool {
	if a.Times > 0 && a.fired >= a.Times {
		return false
	}
	if a.Call > 0 && a.Call != call {
		return false
	}
	if off+int64(n) <= a.Off {
		return false
	}
	return a.End == 0 || off < a.End
}

// FaultySource wraps an iox.Source and injects [Fault]s into its ReadAt.
// It is safe for concurrent use. A Reader treats it as a generic source
// (buffered reads), even when it wraps an *iox.File.
type FaultySource struct {
	inner iox.Source

	mu     sync.Mutex
	faults []*armed
	calls  int

	release     chan struct{}
	releaseOnce sync.Once
	hung        atomic.Int32
}

// NewFaultySource wraps src with faults (more can be added with Add).
func NewFaultySource(src iox.Source, faults ...Fault) *FaultySource {
	s := &FaultySource{inner: src, release: make(chan struct{})}
	for _, f := range faults {
		s.Add(f)
	}
	return s
}

// Add arms one more fault and returns its index for [FaultySource.Fired].
func (s *FaultySource) Add(f Fault) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &armed{Fault: f})
	return len(s.faults) - 1
}

// Fired returns how many times fault i has fired.
func (s *FaultySource) Fired(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults[i].fired
}

// Calls returns the number of ReadAt calls so far.
func (s *FaultySource) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Hung returns the number of reads currently blocked in a Hang fault.
func (s *FaultySource) Hung() int { return int(s.hung.Load()) }

// Release unblocks every current and future Hang fault.
func (s *FaultySource) Release() { s.releaseOnce.Do(func() { close(s.release) }) }

// Size returns the wrapped source's size.
func (s *FaultySource) Size() int64 { return s.inner.Size() }

// Name returns the wrapped source's name.
func (s *FaultySource) Name() string { return s.inner.Name() }

// ReadAt reads from the wrapped source unless a fault fires.
func (s *FaultySource) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	s.calls++
	var hit *armed
	for _, a := range s.faults {
		if a.matches(s.calls, off, len(p)) {
			a.fired++
			hit = a
			break
		}
	}
	s.mu.Unlock()
	if hit == nil {
		return s.inner.ReadAt(p, off)
	}
	switch hit.Kind {
	case Short:
		n := hit.N
		if n <= 0 {
			n = max(len(p)/2, 1)
		}
		n = min(n, len(p))
		m, err := s.inner.ReadAt(p[:n], off)
		if m == n && n < len(p) {
			err = nil // hide EOF: more was asked than returned
		}
		return m, err
	case Fail:
		return 0, cmp.Or(hit.Err, error(syscall.EIO))
	case Delay:
		time.Sleep(hit.Delay)
	case Hang:
		s.hung.Add(1)
		select {
		case <-hit.Until:
		case <-s.release:
		}
		s.hung.Add(-1)
		if hit.Err != nil {
			return 0, hit.Err
		}
	}
	return s.inner.ReadAt(p, off)
}
