package k3

import (
	"context"
	"time"

	"github.com/k3go/k3/internal/engine"
)

// Progress is how far one step of a session has got through its passes
// over the weights. A long prompt is fed in several passes (Options.MaxBatch
// rows each), and at a small budget one pass can take tens of seconds, so
// a program that shows progress needs to hear of each.
type Progress struct {
	// Done of Total tokens of the step have been fed. A prompt's step
	// counts the tokens it computes (a prefix the prefix cache restored
	// is not among them); a decoding step has one token, a speculative
	// one the pending token and its drafts.
	Done, Total int
	// PassRows is the token rows of the pass that just ended, summed
	// over every session in it; PassTime its wall time.
	PassRows int
	PassTime time.Duration
}

// WithProgress returns a copy of ctx that carries f, in the way
// net/http/httptrace carries a trace: every step run with the returned
// context (Session.Step, Logits, Generate and Model.Generate, a
// Conversation's turns) calls f once as it starts (Done 0, on the
// caller's goroutine), then after each pass over the weights that carried
// some of its tokens (on the goroutine that runs the passes). f must
// return quickly and must not call into the model; a panic in it is
// logged and ignored. Model.Stats, read from another goroutine, has the
// bytes read so far.
func WithProgress(ctx context.Context, f func(Progress)) context.Context {
	return engine.WithProgress(ctx, func(p engine.Progress) { f(Progress(p)) })
}

// MemoryPlan returns the plan Open made for the budget: where the bytes
// live, what stays resident, what one pass reads of the trunk.
func (m *Model) MemoryPlan() *MemoryPlan { return newMemoryPlan(m.e.Memory()) }
