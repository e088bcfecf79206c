package server

import (
	"context"
	"testing"
	"time"
)

// TestNoRequestTimeoutByDefault: with RequestTimeout zero (the default,
// as k3 serve's) a request's context has no deadline: a reply that takes
// hours at a small budget is not cut while its client listens; a timeout
// that is asked for bounds it.
func TestNoRequestTimeoutByDefault(t *testing.T) {
	var o Options
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: o}
	ctx, cancel := s.requestContext(context.Background())
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		t.Errorf("default options: the request has a deadline %v", d)
	}
	s.opts.RequestTimeout = time.Hour
	ctx2, cancel2 := s.requestContext(context.Background())
	defer cancel2()
	if d, ok := ctx2.Deadline(); !ok || time.Until(d) > time.Hour {
		t.Errorf("RequestTimeout 1h: deadline %v, %v", d, ok)
	}
	s.opts.RequestTimeout = -1
	if err := s.opts.defaults(); err == nil {
		t.Error("a negative RequestTimeout accepted")
	}
}
