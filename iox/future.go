package iox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Future is the completion of one [Request]. Wait on [Future.Done] (or call
// [Future.Wait]), then read [Future.Err] and [Future.Payload].
//
// Done and Released are distinct; see the package documentation: after an
// error or a cancellation the request's Dst may still be written by a worker
// until Released is closed.
type Future struct {
	r        *Reader
	req      Request
	ws, we   int64 // window in the source
	plo, phi int64 // payload in the source
	batch    *batch

	pending  atomic.Int32 // chunk jobs not yet finished (read or skipped)
	resolved atomic.Bool

	mu       sync.Mutex
	err      error
	payload  []byte
	done     chan struct{}
	released chan struct{}
}

func newFuture(r *Reader, req Request) *Future {
	f := &Future{r: r, req: req, done: make(chan struct{}), released: make(chan struct{})}
	f.plo, f.phi = req.Off, req.Off+int64(req.Len)
	var wl int
	f.ws, wl, _ = Window(req.Off, req.Len)
	f.we = f.ws + int64(wl)
	return f
}

// Request returns the request this future completes.
func (f *Future) Request() Request { return f.req }

// Done is closed when the request is resolved: its payload read, an error,
// its context cancelled, or the Reader closed.
func (f *Future) Done() <-chan struct{} { return f.done }

// Released is closed when no worker will write into the request's Dst any
// more. Only then may Dst be reused or its [Buffer] freed after a failed or
// cancelled request. After a success it is closed before Done.
func (f *Future) Released() <-chan struct{} { return f.released }

// Err returns nil before Done is closed and after a success; otherwise a
// [*ReadError], ctx.Err() of the submitting context, or [ErrClosed].
func (f *Future) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Payload returns Dst[pad : pad+Len], the bytes read, once the request
// succeeded; nil otherwise.
func (f *Future) Payload() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.payload
}

// Wait blocks until Done and returns Payload and Err. It returns promptly
// when the submitting context is cancelled.
func (f *Future) Wait() ([]byte, error) {
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.payload, f.err
}

// WaitAll waits until every future is done and returns the first error in
// argument order, or nil.
func WaitAll(futs ...*Future) error {
	var first error
	for _, f := range futs {
		if _, err := f.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// WaitReleased waits until no worker writes into any of the futures' Dst.
// Call it before reusing the buffers of a batch that failed or was
// cancelled.
func WaitReleased(futs ...*Future) {
	for _, f := range futs {
		<-f.released
	}
}

// resolve settles the future once; later calls are no-ops. It reports
// whether this call settled it.
func (f *Future) resolve(err error) bool {
	f.mu.Lock()
	if f.resolved.Load() {
		f.mu.Unlock()
		return false
	}
	f.resolved.Store(true)
	f.err = err
	if err == nil {
		f.payload = Payload(f.req.Dst, f.req.Off, f.req.Len)
	}
	if f.r != nil { // counted before Done closes, so a waiter sees it
		switch {
		case err == nil:
			f.r.st.completed.Add(1)
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrClosed):
			f.r.st.canceled.Add(1)
		default:
			f.r.st.failed.Add(1)
		}
	}
	close(f.done)
	f.mu.Unlock()

	if f.batch != nil {
		f.batch.resolvedOne()
	}
	if f.req.OnDone != nil {
		f.req.OnDone(f)
	}
	return true
}

// chunkDone records that one chunk serving f has finished (read, failed, or
// skipped), with err for f if it failed. The last chunk releases Dst and, if
// nothing failed, resolves f successfully.
func (f *Future) chunkDone(err error) {
	if err != nil {
		f.resolve(err)
	}
	if f.pending.Add(-1) == 0 {
		close(f.released)
		f.resolve(nil)
	}
}

// finish settles a future that has no chunk jobs.
func (f *Future) finish(err error) {
	close(f.released)
	f.resolve(err)
}

// batch ties the futures of one submission to the context watch. remaining
// counts unresolved futures plus one token held by the submitter until stop
// is set, so stop is never called before it exists.
type batch struct {
	remaining atomic.Int64
	stop      func() bool
}

func (b *batch) resolvedOne() {
	if b.remaining.Add(-1) == 0 {
		b.stop()
	}
}
