package k3

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/iox/ioxtest"
)

// TestInjectedReadFaults wraps the checkpoint's files in fault injectors:
// an EIO on a streamed read fails the step with an error naming the file
// and offset; the model stays usable for other sessions; short reads and
// EINTR are retried transparently; a slow disk only slows things down.
func TestInjectedReadFaults(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ref, err := Open(dir, Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.NewSession().Logits(context.Background(), []int{1, 2, 3, 4})
	ref.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		fault ioxtest.Fault
		fails bool
	}{
		{"EIO once", ioxtest.Fault{Kind: ioxtest.Fail, Off: 400_000, End: 3_000_000, Times: 1}, true},
		// Layer 1's routed experts lie in [531776, 584000) of the shard
		// (data offsets 400416..452640 after a 131,360-byte header).
		{"EIO on an expert", ioxtest.Fault{Kind: ioxtest.Fail, Off: 531_776, End: 584_000, Times: 1}, true},
		{"short reads", ioxtest.Fault{Kind: ioxtest.Short, Off: 0, End: 1 << 40, Times: 50}, false},
		{"EINTR", ioxtest.Fault{Kind: ioxtest.Fail, Err: syscall.EINTR, Off: 0, End: 1 << 40, Times: 20}, false},
		{"slow", ioxtest.Fault{Kind: ioxtest.Delay, Delay: 2e6, Off: 0, End: 1 << 40, Times: 20}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var faulty *ioxtest.FaultySource
			wrap := func(path string, f *iox.File) iox.Source {
				faulty = ioxtest.NewFaultySource(f)
				return faulty
			}
			m, err := Open(dir, Options{RAMBudget: 56e6, MaxContext: 64, wrapSource: wrap})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			idx := faulty.Add(c.fault) // armed after Open: only streamed reads see it
			ctx := context.Background()
			s := m.NewSession()
			got, err := s.Logits(ctx, []int{1, 2, 3, 4})
			if c.fails {
				if err == nil || !strings.Contains(err.Error(), "model.safetensors") || !errors.Is(err, syscall.EIO) {
					t.Fatalf("got %v, want an EIO naming the file", err)
				}
				if strings.Contains(c.name, "expert") && !errors.Is(err, ErrExpertLoad) {
					t.Fatalf("an expert read failed without ErrExpertLoad: %v", err)
				}
				// The fault fired once: once the failed session is closed,
				// a new one works and is exact.
				s.Close()
				if got, err = m.NewSession().Logits(ctx, []int{1, 2, 3, 4}); err != nil {
					t.Fatalf("after the fault: %v", err)
				}
			} else if err != nil {
				t.Fatalf("%s should be retried: %v", c.name, err)
			}
			if faulty.Fired(idx) == 0 {
				t.Fatal("the fault never fired")
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("logit %d = %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestHungReadCancelled hangs every streamed read: a step whose context is
// cancelled returns promptly with the context's error (the buffer of the
// hung read stays reserved until the read ends), and once the disk answers
// again Close returns and the model's goroutines are gone.
func TestHungReadCancelled(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	var faulty *ioxtest.FaultySource
	wrap := func(path string, f *iox.File) iox.Source {
		faulty = ioxtest.NewFaultySource(f)
		return faulty
	}
	before := runtime.NumGoroutine()
	// 58 MB keeps the embedding table resident: an embedding row is read
	// into the pass's scratch, and a hung read of one holds its step until
	// the disk answers (docs/RELIABILITY.md).
	m, err := Open(dir, Options{RAMBudget: 58e6, MaxContext: 64, wrapSource: wrap})
	if err != nil {
		t.Fatal(err)
	}
	faulty.Add(ioxtest.Fault{Kind: ioxtest.Hang, Off: 0, End: 1 << 40})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.NewSession().Step(ctx, []int{1, 2, 3})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the step did not return after its context was cancelled")
	}
	faulty.Release()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before Open", n, before)
	}
}

// TestExpertFaultInBatch fails one expert read while several sessions share
// passes: exactly the sessions whose pass failed get ErrExpertLoad, the
// others are exact, nothing hangs, and the model stays usable.
func TestExpertFaultInBatch(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ids := []int{1, 2, 3, 4}
	ref, err := Open(dir, Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.NewSession().Logits(context.Background(), ids)
	ref.Close()
	if err != nil {
		t.Fatal(err)
	}
	var faulty *ioxtest.FaultySource
	wrap := func(path string, f *iox.File) iox.Source {
		faulty = ioxtest.NewFaultySource(f)
		return faulty
	}
	m, err := Open(dir, Options{RAMBudget: 60e6, MaxContext: 64, Sessions: 4, wrapSource: wrap})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	faulty.Add(ioxtest.Fault{Kind: ioxtest.Fail, Off: 531_776, End: 584_000, Times: 1})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	outs := make([][]float32, 4)
	gate := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			<-gate
			s := m.NewSession()
			defer s.Close()
			outs[g], errs[g] = s.Logits(context.Background(), ids)
		})
	}
	close(gate)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		t.Fatal("sessions hung after an expert read failed")
	}
	failed := 0
	for g, err := range errs {
		if err != nil {
			if !errors.Is(err, ErrExpertLoad) {
				t.Fatalf("session %d: %v, want ErrExpertLoad", g, err)
			}
			failed++
			continue
		}
		for i := range want {
			if outs[g][i] != want[i] {
				t.Fatalf("session %d logit %d = %v, want %v", g, i, outs[g][i], want[i])
			}
		}
	}
	if failed == 0 {
		t.Fatal("the fault fired in no session")
	}
	got, err := m.NewSession().Logits(context.Background(), ids)
	if err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after the fault: logit %d = %v, want %v", i, got[i], want[i])
		}
	}
	t.Logf("%d of 4 sessions were in the failed pass", failed)
}
