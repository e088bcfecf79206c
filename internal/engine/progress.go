package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/k3go/k3/internal/platform/crash"
)

// Progress is how far a step has got through its passes; see k3.Progress.
type Progress struct {
	Done, Total int
	PassRows    int
	PassTime    time.Duration
}

// ProgressFunc receives a step's Progress after each pass that carried
// some of its tokens, on the batcher's goroutine.
type ProgressFunc func(Progress)

type progressKey struct{}

// WithProgress returns ctx carrying f: every step made with the returned
// context (or one derived from it) reports to f; see k3.WithProgress.
func WithProgress(ctx context.Context, f ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// progressOf returns the progress function ctx carries, or nil.
func progressOf(ctx context.Context) ProgressFunc {
	f, _ := ctx.Value(progressKey{}).(ProgressFunc)
	return f
}

// reportProgress calls f with p; a panic in it (the caller's code) is
// logged, not fatal: the step goes on.
func reportProgress(log *slog.Logger, f ProgressFunc, p Progress) {
	var err error
	defer func() {
		if err != nil {
			log.Error("k3: a progress function panicked", "err", err, "stack", string(crash.Stack(err)))
		}
	}()
	defer crash.Catch("a progress function (WithProgress)", &err)
	f(p)
}
