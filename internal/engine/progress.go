package engine

import (
	"context"
	"time"
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
