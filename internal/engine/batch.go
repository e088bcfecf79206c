package engine

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/sched"
	"github.com/k3go/k3/internal/platform/crash"
	"github.com/k3go/k3/model"
)

// request is one session's step waiting for, or riding in, passes: the
// tokens to feed, where the logits go, and how far it got. A session owns
// one and reuses it, so a step allocates nothing.
type request struct {
	ctx    context.Context
	st     *model.State
	tokens []int
	out    []float32
	all    bool
	// progress, if not nil, is told after every pass that carried some of
	// the step's tokens how many are fed (WithProgress).
	progress ProgressFunc

	// ahead is the prompt tokens its caller feeds right after this step
	// (a prefill cut at the prefix cache's checkpoints): work that keeps a
	// wide plan worth holding between the steps.
	ahead atomic.Int64

	fed     int   // tokens fed by completed passes
	err     error // set with done
	broken  bool  // a pass that carried it failed: its state is undefined
	passErr error // why, when broken
	done    chan struct{}

	queued bool      // in the queue (under batcher.mu)
	doneAt time.Time // when its last step finished (under batcher.mu)

	spec specStep // a decoding step that offers drafts (specpass.go)
}

// batcher coalesces the steps of every session of a Model into shared
// passes over the weights: one goroutine that takes the waiting steps,
// asks the policy (internal/engine/sched) for the next pass, runs it and wakes
// the steps it finished. Callers block in do; sampling stays on their
// goroutines.
type batcher struct {
	log   *slog.Logger
	m     *model.Model
	room  passRoom
	chunk int // most rows of one prompt per pass

	mu     sync.Mutex
	queue  []*request // in arrival order
	recent []*request // finished lately: likely to come back for the next pass
	closed bool
	wake   chan struct{}
	exited chan struct{}

	// Loop state, touched only by the batcher goroutine.
	start  int
	reqs   []sched.Request
	takes  []sched.Take
	groups []model.Group
	inPass []*request
	sc     *model.Scratch // the current pass's
	last   time.Duration  // the last pass's wall time

	observe atomic.Pointer[func(rows int, d time.Duration)] // Engine.ObservePasses

	spec     *passSpec // speculative decoding's policy (specpass.go); nil: off
	passRows int       // the most rows of the pass being built
}

// passRoom gives the batcher the scratch and the most rows of its next
// pass, for the work waiting: the engine moves between the plans of its
// budget there (planner.Residency), so that memory a wide pass needs holds
// weights while no prompt waits. An error fails the steps waiting.
type passRoom interface {
	prepare(w planner.Work) (sc *model.Scratch, rows int, err error)
}

// fixedRoom is one scratch for every pass.
type fixedRoom struct{ sc *model.Scratch }

func (f fixedRoom) prepare(planner.Work) (*model.Scratch, int, error) { return f.sc, f.sc.Rows(), nil }

// newBatcher starts the batcher; chunk ≤ 0 lets a prompt fill a pass.
func newBatcher(log *slog.Logger, m *model.Model, room passRoom, chunk int) *batcher {
	if chunk <= 0 {
		chunk = math.MaxInt
	}
	b := &batcher{log: log, m: m, room: room, chunk: chunk,
		wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go b.loop()
	return b
}

// do runs r's step through shared passes and returns when it is done: all
// its tokens fed, or its context ended between passes (r.fed tells how
// many were fed), or a pass carrying it failed (r.broken).
func (b *batcher) do(r *request) error {
	if r.done == nil {
		r.done = make(chan struct{}, 1)
	}
	r.fed, r.err, r.broken, r.passErr = 0, nil, false, nil
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return model.ErrClosed
	}
	b.queue = append(b.queue, r)
	r.queued = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	<-r.done
	err := r.err
	r.ctx, r.st, r.tokens, r.out, r.err, r.passErr, r.progress = nil, nil, nil, nil, nil, nil, nil
	return err
}

// close fails every waiting step with ErrClosed and stops the goroutine
// after its pass in flight (model.Model.Interrupt ends that one early).
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	<-b.exited
}

// finish settles r (b.mu held) and remembers it as likely to come back.
func (b *batcher) finish(r *request, err error) {
	r.err = err
	r.queued = false
	r.doneAt = time.Now()
	if !slices.Contains(b.recent, r) {
		b.recent = append(b.recent, r)
	}
	r.done <- struct{}{}
}

// expected counts the recently finished steps that have not come back
// yet, forgetting those that finished more than two passes ago (b.mu
// held): a session that stopped stepping is waited for at most once.
func (b *batcher) expected(now time.Time) int {
	window := max(2*b.last, 10*time.Millisecond)
	k, n := 0, 0
	for _, r := range b.recent {
		if r.queued || now.Sub(r.doneAt) > window {
			continue
		}
		b.recent[k] = r
		k++
		n++
	}
	clear(b.recent[k:])
	b.recent = b.recent[:k]
	return n
}

// work sums what waits (b.mu held): the decode rows and prompt rows of the
// queued steps, and the prompt their callers (and those of steps finished
// lately, which are likely to come back) announced to feed next.
func (b *batcher) work(now time.Time) planner.Work {
	var w planner.Work
	for _, r := range b.queue {
		switch left := b.left(r); {
		case left == 1:
			w.DecodeRows++
		case left > 1:
			w.PromptRows += left
		}
		w.PromptRows += int(r.ahead.Load())
	}
	b.expected(now)
	for _, r := range b.recent {
		if !r.queued {
			w.PromptRows += int(r.ahead.Load())
		}
	}
	return w
}

// maxGrace bounds how long the batcher waits for the sequences of the last
// pass to come back (they sample their next token in between) before it
// starts a pass without them; the wait is also at most a 32nd of the last
// pass, so it costs at most 3% when a sequence does not come back.
const maxGrace = 25 * time.Millisecond

func (b *batcher) loop() {
	defer close(b.exited)
	for {
		b.mu.Lock()
		for len(b.queue) == 0 && !b.closed {
			b.mu.Unlock()
			<-b.wake
			b.mu.Lock()
		}
		if b.closed {
			for _, r := range b.queue {
				b.finish(r, model.ErrClosed)
			}
			b.queue = nil
			b.mu.Unlock()
			return
		}
		// Continuous batching: the sequences of the last pass are sampling
		// their next token; give them a moment (a small fraction of a
		// pass) to join this one.
		if now := time.Now(); b.expected(now) > 0 {
			deadline := now.Add(min(maxGrace, b.last/32))
			for b.expected(time.Now()) > 0 && !b.closed {
				left := time.Until(deadline)
				if left <= 0 {
					break
				}
				b.mu.Unlock()
				select {
				case <-b.wake:
				case <-time.After(left):
				}
				b.mu.Lock()
			}
		}
		// Steps whose context ended leave now, their state intact.
		k := 0
		for _, r := range b.queue {
			if err := r.ctx.Err(); err != nil {
				b.finish(r, err)
				continue
			}
			b.queue[k] = r
			k++
		}
		clear(b.queue[k:])
		b.queue = b.queue[:k]
		if len(b.queue) == 0 {
			b.mu.Unlock()
			continue
		}
		// The plan for the work waiting (a move between plans runs here,
		// between passes, without the lock: steps keep arriving).
		work := b.work(time.Now())
		b.mu.Unlock()
		sc, rows, err := b.room.prepare(work)
		b.mu.Lock()
		if err != nil {
			for _, r := range b.queue {
				b.finish(r, err)
			}
			clear(b.queue)
			b.queue = b.queue[:0]
			b.mu.Unlock()
			continue
		}
		if len(b.queue) == 0 {
			b.mu.Unlock()
			continue
		}
		b.sc = sc
		b.reqs = b.reqs[:0]
		for _, r := range b.queue {
			b.reqs = append(b.reqs, sched.Request{Left: b.left(r)})
		}
		b.takes = sched.Next(b.takes[:0], b.reqs, rows, b.chunk, b.start)
		b.passRows = rows
		b.start++
		b.inPass = b.inPass[:0]
		for _, t := range b.takes {
			b.inPass = append(b.inPass, b.queue[t.Index])
		}
		b.mu.Unlock()

		b.grantDrafts()
		b.run()
	}
}

// run runs one pass over b.takes / b.inPass and settles its requests.
func (b *batcher) run() {
	V := b.m.Cfg.Vocab
	b.groups = b.groups[:0]
	for i, t := range b.takes {
		r := b.inPass[i]
		g := model.Group{St: r.st, Tokens: r.tokens[r.fed : r.fed+t.Rows], All: r.all}
		switch {
		case r.all:
			g.Out = r.out[r.fed*V : (r.fed+t.Rows)*V]
		case r.fed+t.Rows == len(r.tokens):
			g.Out = r.out[:V]
		}
		b.groups = append(b.groups, g)
	}
	ctx, cancel := b.passContext()
	start := time.Now()
	err := b.forward(ctx)
	b.last = time.Since(start)
	if cancel != nil {
		cancel()
	}
	if errors.Is(err, crash.ErrInternal) {
		b.log.Error("k3: a forward pass panicked; its sequences must be reset", "err", err, "stack", string(crash.Stack(err)))
	}
	// A non-finite value fails only the sequences whose rows held it.
	isPartial := err != nil && isPartialError(err)
	if err == nil {
		rows := 0
		for _, t := range b.takes {
			rows += t.Rows
		}
		b.passDone(rows, b.last)
	}
	if err == nil || isPartial {
		rows := 0
		for _, t := range b.takes {
			rows += t.Rows
		}
		if f := b.observe.Load(); f != nil {
			b.notify(*f, rows)
		}
		// Before settle: a step it finishes returns to its caller, who
		// may reuse the request.
		for i, t := range b.takes {
			if r := b.inPass[i]; r.progress != nil && (err == nil || b.groups[i].Err == nil) {
				b.report(r, Progress{Done: r.fed + t.Rows, Total: len(r.tokens), PassRows: rows, PassTime: b.last})
			}
		}
	}
	b.settle(err, isPartial)
}

// forward runs the pass. ForwardBatch turns a panic of the pass into an
// error itself; this catches one in what surrounds it (a weight source's
// pass lock), so that no panic ends the batcher's goroutine.
func (b *batcher) forward(ctx context.Context) (err error) {
	defer crash.Catch("the batcher", &err)
	return b.m.ForwardBatch(ctx, b.sc, b.groups)
}

// notify calls an observer (the caller's code) with the pass's rows; a
// panic in it is logged, not fatal: the pass itself succeeded.
func (b *batcher) notify(f func(rows int, d time.Duration), rows int) {
	var err error
	defer func() {
		if err != nil {
			b.log.Error("k3: a pass observer panicked", "err", err, "stack", string(crash.Stack(err)))
		}
	}()
	defer crash.Catch("a pass observer (Model.ObservePasses)", &err)
	f(rows, b.last)
}

// report calls a step's progress function (the caller's code); a panic
// in it is logged, as an observer's is.
func (b *batcher) report(r *request, p Progress) { reportProgress(b.log, r.progress, p) }

// settle records the pass's outcome in its requests and finishes those
// that are done or broken.
func (b *batcher) settle(err error, isPartial bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, t := range b.takes {
		r := b.inPass[i]
		rerr := err
		if isPartial {
			rerr = b.groups[i].Err
		}
		if rerr != nil {
			r.broken, r.passErr = true, rerr
		} else {
			r.fed += t.Rows
		}
	}
	clear(b.groups)
	k := 0
	for _, r := range b.queue {
		switch {
		case r.broken:
			b.finish(r, r.passErr)
		case r.fed == len(r.tokens):
			b.finish(r, nil)
		default:
			b.queue[k] = r
			k++
			continue
		}
	}
	clear(b.queue[k:])
	b.queue = b.queue[:k]
	clear(b.inPass)
}

// passContext returns the context a pass runs under. The pass serves
// several callers, so one caller's cancellation must not stop it; it stops
// early only when every caller in it has gone (a lone caller's own context
// is used as it is), or when the Model closes (Model.Interrupt).
func (b *batcher) passContext() (context.Context, context.CancelFunc) {
	if len(b.inPass) == 1 {
		return b.inPass[0].ctx, nil
	}
	for _, r := range b.inPass {
		if r.ctx.Done() == nil {
			return context.Background(), nil // this caller never cancels
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(b.inPass)))
	stops := make([]func() bool, 0, len(b.inPass))
	for _, r := range b.inPass {
		stops = append(stops, context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// isPartialError reports whether a pass failed only some of its sequences
// (each Group.Err says which). Out of line: errors.As's target escapes, so
// the clean path must not declare it.
func isPartialError(err error) bool {
	var partial *model.PartialError
	return errors.As(err, &partial)
}
