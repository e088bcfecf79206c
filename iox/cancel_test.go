package iox_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/iox/ioxtest"
)

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestCancelHungRead: a read that never returns. Cancelling its context
// resolves the request at once; Dst stays claimed (Released open) until the
// read returns; other reads proceed meanwhile; Close leaves no goroutine
// (synctest fails the test if any remains blocked).
func TestCancelHungRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := ioxtest.NewFaultySource(ioxtest.PatternSource{N: 1 << 20, Path: "hung"},
			ioxtest.Fault{Kind: ioxtest.Hang, Off: 0, End: 4096, Times: 1})
		r, err := iox.NewReader(iox.ReaderOptions{QueueDepth: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		dst := make([]byte, 8192)
		var called int
		fu := r.Submit(ctx, iox.Request{Src: src, Off: 10, Len: 100, Dst: dst, OnDone: func(*iox.Future) { called++ }})
		synctest.Wait()
		if src.Hung() != 1 || isClosed(fu.Done()) {
			t.Fatalf("hung %d, done %v", src.Hung(), isClosed(fu.Done()))
		}

		other := make([]byte, 8192)
		p, err := r.Submit(t.Context(), iox.Request{Src: src, Off: 8192, Len: 100, Dst: other}).Wait()
		if err != nil || ioxtest.CheckPattern(p, 8192) != nil {
			t.Fatalf("other read: %v", err)
		}

		start := time.Now()
		cancel()
		if _, err := fu.Wait(); !errors.Is(err, context.Canceled) || err != context.Canceled {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if time.Since(start) != 0 {
			t.Fatal("cancellation was not immediate")
		}
		synctest.Wait()
		if called != 1 || fu.Payload() != nil {
			t.Fatalf("OnDone called %d times, payload %v", called, fu.Payload() != nil)
		}
		if isClosed(fu.Released()) {
			t.Fatal("Released while the read is still in flight: Dst could be reused under it")
		}
		src.Release()
		synctest.Wait()
		if !isClosed(fu.Released()) {
			t.Fatal("not released after the read returned")
		}
		if err := fu.Err(); err != context.Canceled {
			t.Fatalf("late result replaced the error: %v", err)
		}
		r.Close()
		if st := r.Stats(); st.Canceled != 1 || st.Completed != 1 || st.InFlight != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := ioxtest.NewFaultySource(ioxtest.PatternSource{N: 1 << 20}, ioxtest.Fault{Kind: ioxtest.Hang})
		r, _ := iox.NewReader(iox.ReaderOptions{})
		defer r.Close()
		defer src.Release()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := r.Submit(ctx, iox.Request{Src: src, Off: 0, Len: 1 << 20, Dst: make([]byte, 1<<20)}).Wait()
		if err != context.DeadlineExceeded || time.Since(start) != 5*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

// TestCancelQueued: chunks of a cancelled request that have not started are
// dropped without touching Dst.
func TestCancelQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := ioxtest.NewFaultySource(ioxtest.PatternSource{N: 64 << 20},
			ioxtest.Fault{Kind: ioxtest.Hang, Off: 0, End: 1, Times: 1})
		r, _ := iox.NewReader(iox.ReaderOptions{QueueDepth: 1, ChunkSize: 1 << 20})
		ctx, cancel := context.WithCancel(t.Context())
		blocker := r.Submit(t.Context(), iox.Request{Src: src, Off: 0, Len: 100, Dst: make([]byte, 4096)})
		synctest.Wait()
		dst := make([]byte, 16<<20)
		fu := r.Submit(ctx, iox.Request{Src: src, Off: 1 << 20, Len: 16 << 20, Dst: dst})
		cancel()
		synctest.Wait()
		if fu.Err() != context.Canceled || !isClosed(fu.Released()) {
			t.Fatalf("err %v, released %v", fu.Err(), isClosed(fu.Released()))
		}
		src.Release()
		if _, err := blocker.Wait(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		for _, b := range dst {
			if b != 0 {
				t.Fatal("a dropped chunk wrote into Dst")
			}
		}
		if st := r.Stats(); st.Skipped != 16 || st.Chunks != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestCloseWithQueuedAndHung: Close fails queued requests with ErrClosed at
// once and waits for the read in flight.
func TestCloseWithQueuedAndHung(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := ioxtest.NewFaultySource(ioxtest.PatternSource{N: 1 << 20},
			ioxtest.Fault{Kind: ioxtest.Hang, Off: 0, End: 1, Times: 1})
		r, _ := iox.NewReader(iox.ReaderOptions{QueueDepth: 1})
		var futs []*iox.Future
		for i := range 4 {
			futs = append(futs, r.Submit(t.Context(), iox.Request{Src: src, Off: int64(i) * 8192, Len: 10, Dst: make([]byte, 4096)}))
		}
		synctest.Wait()
		closed := make(chan struct{})
		go func() { r.Close(); close(closed) }()
		synctest.Wait()
		for _, fu := range futs[1:] {
			if fu.Err() != iox.ErrClosed || !isClosed(fu.Released()) {
				t.Fatalf("queued request: %v", fu.Err())
			}
		}
		if isClosed(closed) || isClosed(futs[0].Done()) {
			t.Fatal("Close returned with a read in flight")
		}
		src.Release()
		<-closed
		if _, err := futs[0].Wait(); err != nil {
			t.Fatal(err)
		}
		iox.WaitReleased(futs...)
	})
}

// TestSlowReadsTiming: with a fake clock the time accounting is exact:
// 8 reads of 20 ms at queue depth 4 take 160 ms of read time in 40 ms of
// busy wall time.
func TestSlowReadsTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := ioxtest.NewFaultySource(ioxtest.PatternSource{N: 1 << 20},
			ioxtest.Fault{Kind: ioxtest.Delay, Delay: 20 * time.Millisecond})
		r, _ := iox.NewReader(iox.ReaderOptions{QueueDepth: 4})
		defer r.Close()
		var reqs []iox.Request
		for i := range 8 {
			reqs = append(reqs, iox.Request{Src: src, Off: int64(i) * 65536, Len: 1000, Dst: make([]byte, 4096)})
		}
		start := time.Now()
		if err := iox.WaitAll(r.SubmitBatch(t.Context(), reqs)...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // idle time is not busy time
		st := r.Stats()
		if time.Since(start) != 1040*time.Millisecond || st.ReadTime != 160*time.Millisecond || st.BusyTime != 40*time.Millisecond || st.MaxInFlight != 4 {
			t.Fatalf("elapsed %v, stats %+v", time.Since(start), st)
		}
	})
}
