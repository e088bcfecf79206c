package server

import (
	"context"
	"errors"
	"sync"
)

// ErrShutdown is the cause to cancel the requests' base context with
// (http.Server.BaseContext) when a graceful shutdown runs out of time:
// their generations stop and streams end with a "shutting down" error.
var ErrShutdown = errors.New("the server is shutting down")

// errDeadline is the cause of a request's context when it runs past
// Options.RequestTimeout.
var errDeadline = errors.New("per-request deadline exceeded")

// limiter keeps the server's memory bounded however many clients connect.
// A generation request is admitted first (at most Sessions + Queue at once,
// counted before its body is read: the rest get 429), then reads, decodes
// and tokenizes its body under one of a few decode places (so at most that
// many bodies are in memory at once, however large the queue), drops the
// body, and waits in the queue for places for its sequences (Sessions in
// all; n of them for a request with n choices).
type limiter struct {
	mu       sync.Mutex
	admitted int // generation requests in the server: decoding, queued or running
	capacity int

	decode chan struct{} // one token per body being read, decoded and tokenized
	seqs   chan struct{} // one token per sequence generating
	// take is held (a one-token channel, so waiting for it can be
	// cancelled) by the one request taking its sequence places: a request
	// with n choices takes n places one at a time, and two such requests
	// must not each hold some of the places the other waits for.
	take chan struct{}
}

func newLimiter(sessions, queue, decoders int) *limiter {
	return &limiter{capacity: sessions + queue, decode: make(chan struct{}, decoders),
		seqs: make(chan struct{}, sessions), take: make(chan struct{}, 1)}
}

// admit counts a request in, or reports false when the server already
// holds as many as it queues.
func (l *limiter) admit() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.admitted >= l.capacity {
		return false
	}
	l.admitted++
	return true
}

func (l *limiter) leave() {
	l.mu.Lock()
	l.admitted--
	l.mu.Unlock()
}

// startDecode waits for a decode place.
func (l *limiter) startDecode(ctx context.Context) error {
	select {
	case l.decode <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (l *limiter) endDecode() { <-l.decode }

// acquire waits for n sequence places (n <= Sessions).
func (l *limiter) acquire(ctx context.Context, n int) error {
	select {
	case l.take <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-l.take }()
	for k := range n {
		select {
		case l.seqs <- struct{}{}:
		case <-ctx.Done():
			l.release(k)
			return context.Cause(ctx)
		}
	}
	return nil
}

func (l *limiter) release(n int) {
	for range n {
		<-l.seqs
	}
}
