package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/internal/engine/statefile"
	"github.com/k3go/k3/internal/platform/crash"
	"github.com/k3go/k3/model"
)

// Seq is one sequence: its model state (KDA recurrent state, short-conv
// histories, latent MLA cache), the tokens fed so far, and the tokens that
// belong to it but are not fed yet. It is a k3.Session's engine. A Seq is
// not safe for concurrent use; several Seqs step concurrently and share
// passes.
type Seq struct {
	e      *Engine
	st     *model.State // nil until the sequence first needs state
	tokens []int        // fed to the model
	// pending are tokens that belong to the sequence but have not been fed
	// yet: the last token a generation produced, or a chat's framing. The
	// next step feeds them first.
	pending []int
	feed    []int // scratch for pending + new tokens
	logits  []float32
	broken  bool    // a failed step left the state undefined
	closed  bool    // Close was called: every method fails with ErrClosed
	req     request // its step, as the batcher sees it
	// Speculative decoding (spec.go): the drafter's and the policy's view
	// of the sequence, the sequence as the drafter sees it, a speculative
	// step's logits, and the drafts verified and accepted so far.
	sq                        specpolicy.Seq
	specSeq                   []int
	specOut                   []float32
	specDrafted, specAccepted int64
	// idle is used by the default sequence only: true while no step runs
	// on it, so that it can give its budget place away.
	idle atomic.Bool
	// reused counts the last step's tokens restored from the prefix cache.
	reused int
	// replyFrom is the length of the sequence after its last prompt went
	// through the prefix cache (0: none did): a generation's reply starts
	// there, and Generate saves it from there (keepReply).
	replyFrom int
}

// NewSeq starts an empty sequence. Its state is allocated when it is first
// used and released by Close. Under a RAM budget at most Options.Sessions
// sequences hold state at once: a step of one more fails with
// planner.ErrBudget until another is closed.
func (e *Engine) NewSeq() *Seq { return &Seq{e: e} }

// takeSlot reserves room in the budget for one more sequence's state, or
// fails with planner.ErrBudget. When every place is taken and one is the
// default sequence's, that sequence gives its place up if it is idle: its
// sequence is dropped, and the next DefaultSeq step starts a new one.
func (e *Engine) takeSlot(for_ *Seq) error {
	if e.slots == nil {
		return nil
	}
	select {
	case e.slots <- struct{}{}:
		return nil
	default:
	}
	e.defMu.Lock()
	def := e.def
	if def != nil && def != for_ && def.st != nil && def.idle.CompareAndSwap(true, false) {
		def.release() // gives its slot back
		def.idle.Store(true)
	}
	e.defMu.Unlock()
	select {
	case e.slots <- struct{}{}:
		return nil
	default:
		return fmt.Errorf("k3: %w: %d sessions already hold state, as many as the budget reserves (Options.Sessions); close one", planner.ErrBudget, cap(e.slots))
	}
}

func (e *Engine) releaseSlot() {
	if e.slots != nil {
		<-e.slots
	}
}

// DefaultSeq returns the sequence behind k3.Model.Step and marks it busy;
// done marks it idle again. ok is false when a step already runs on it.
func (e *Engine) DefaultSeq() (s *Seq, done func(), ok bool) {
	e.defMu.Lock()
	if e.def == nil {
		e.def = e.NewSeq()
		e.def.idle.Store(true)
	}
	s = e.def
	e.defMu.Unlock()
	if !s.idle.CompareAndSwap(true, false) {
		return nil, nil, false
	}
	return s, func() { s.idle.Store(true) }, true
}

// ResetDefault drops the default sequence and gives its place in the
// budget back, unless a step runs on it.
func (e *Engine) ResetDefault() {
	e.defMu.Lock()
	defer e.defMu.Unlock()
	if e.def != nil && e.def.idle.CompareAndSwap(true, false) {
		e.def.release()
		e.def.idle.Store(true)
	}
}

// state returns the sequence's model state, taking a place in the budget
// and allocating it on first use.
func (s *Seq) state() (*model.State, error) {
	if s.st != nil {
		return s.st, nil
	}
	if err := s.e.takeSlot(s); err != nil {
		return nil, err
	}
	s.st = s.e.m.NewState(s.e.opts.MaxContext)
	return s.st, nil
}

// Close releases the sequence's state and its place in the RAM budget;
// every later method fails with ErrClosed.
func (s *Seq) Close() {
	s.release()
	s.closed = true
}

// release drops the state and the sequence and gives the place in the
// budget back; the sequence stays usable and takes a place again when it
// next needs state (the default sequence gives its place away so).
func (s *Seq) release() {
	if s.st != nil {
		s.e.m.Forget(s.st)
		s.st = nil
		s.e.releaseSlot()
	}
	s.tokens, s.pending = s.tokens[:0], s.pending[:0]
	s.broken = false
	s.sq.Reset()
}

// usable fails with model.ErrClosed once the sequence is closed.
func (s *Seq) usable(op string) error {
	if s.closed {
		return fmt.Errorf("k3: %s: session %w", op, model.ErrClosed)
	}
	return nil
}

// Len returns the length of the sequence: tokens fed plus pending ones.
func (s *Seq) Len() int { return len(s.tokens) + len(s.pending) }

// Tokens returns the sequence so far (a copy), pending tokens included.
func (s *Seq) Tokens() []int {
	return append(append([]int(nil), s.tokens...), s.pending...)
}

// Pending returns the tokens not fed yet (the sequence's own slice: a chat
// appends its framing to it with SetPending).
func (s *Seq) Pending() []int { return s.pending }

// SetPending replaces the tokens not fed yet.
func (s *Seq) SetPending(p []int) { s.pending = p }

// Reset empties the sequence, keeping its allocations; it also recovers a
// sequence a failed step left unusable.
func (s *Seq) Reset() {
	if s.st != nil {
		s.st.Reset()
	}
	s.tokens = s.tokens[:0]
	s.pending = s.pending[:0]
	s.broken = false
	s.replyFrom = 0
	s.sq.Reset()
}

// Step appends tokens (after any pending ones) and returns the logits of
// the last position; see k3.Session.Step.
func (s *Seq) Step(ctx context.Context, tokens []int) ([]float32, error) {
	if err := s.usable("Step"); err != nil {
		return nil, err
	}
	if len(tokens) == 0 && len(s.pending) == 0 {
		return nil, fmt.Errorf("k3: Step: %w: no tokens", ErrBadOptions)
	}
	V := s.e.m.Cfg.Vocab
	if cap(s.logits) < V {
		s.logits = make([]float32, V)
	}
	if len(s.pending)+len(tokens) >= minPrefixTokens {
		s.reused = 0 // a prompt: count its restored tokens afresh
		if pc := s.e.prefix; pc != nil {
			return s.stepCached(ctx, pc, tokens)
		}
	}
	if err := s.forward(ctx, tokens, s.logits[:V], false); err != nil {
		return nil, err
	}
	return s.logits[:V], nil
}

// Reused returns how many tokens of the last prompt (a Step of two tokens
// or more) were restored from the prefix cache instead of being computed.
func (s *Seq) Reused() int { return s.reused }

// Logits appends tokens like Step and returns the logits of every one of
// their positions (a new slice); see k3.Session.Logits.
func (s *Seq) Logits(ctx context.Context, tokens []int) ([]float32, error) {
	if err := s.usable("Logits"); err != nil {
		return nil, err
	}
	if len(tokens) == 0 && len(s.pending) == 0 {
		return nil, fmt.Errorf("k3: Logits: %w: no tokens", ErrBadOptions)
	}
	V := s.e.m.Cfg.Vocab
	out := make([]float32, (len(s.pending)+len(tokens))*V)
	skip := len(s.pending) * V
	if err := s.forward(ctx, tokens, out, true); err != nil {
		return nil, err
	}
	return out[skip:], nil
}

// forward feeds the pending tokens and then tokens through the batcher.
func (s *Seq) forward(ctx context.Context, tokens []int, out []float32, all bool) error {
	if err := s.usable("step"); err != nil {
		return err
	}
	if s.broken {
		return fmt.Errorf("k3: session unusable after a failed step; call Reset")
	}
	if len(s.pending) > 0 {
		s.feed = append(append(s.feed[:0], s.pending...), tokens...)
		tokens = s.feed
	}
	V := s.e.m.Cfg.Vocab
	for i, t := range tokens {
		if t < 0 || t >= V {
			return fmt.Errorf("k3: %w: token %d at index %d is outside [0, %d)", model.ErrTokenOutOfRange, t, i, V)
		}
	}
	if len(s.tokens)+len(tokens) > s.e.opts.MaxContext {
		return fmt.Errorf("k3: %w: %d + %d tokens exceed MaxContext %d", model.ErrContextFull, len(s.tokens), len(tokens), s.e.opts.MaxContext)
	}
	if err := s.e.enter(); err != nil {
		return err
	}
	defer s.e.leave()
	if err := s.e.checkFiles(); err != nil {
		return err
	}
	s.e.log.LogAttrs(ctx, slog.LevelDebug, "k3: forward", slog.Int("position", len(s.tokens)), slog.Int("tokens", len(tokens)))
	st, err := s.state()
	if err != nil {
		return err
	}
	// Other sequences' steps share the pass (the batcher); a step whose
	// context ends between passes leaves with what was fed so far.
	r := &s.req
	r.ctx, r.st, r.tokens, r.out, r.all = ctx, st, tokens, out, all
	if r.progress = progressOf(ctx); r.progress != nil {
		reportProgress(s.e.log, r.progress, Progress{Total: len(tokens)})
	}
	err = s.e.b.do(r)
	if err != nil {
		if r.broken {
			s.broken = true
			if errors.Is(err, model.ErrClosed) {
				return fmt.Errorf("k3: model %w", model.ErrClosed)
			}
			return fmt.Errorf("k3: step at position %d: %w", len(s.tokens), err)
		}
		s.keepFed(tokens[:r.fed])
		if errors.Is(err, model.ErrClosed) {
			return fmt.Errorf("k3: model %w", model.ErrClosed)
		}
		return fmt.Errorf("k3: step at position %d: %w", len(s.tokens), err)
	}
	// A step with drafts fed only those the batcher granted (r.fed).
	s.tokens = append(s.tokens, tokens[:r.fed]...)
	s.pending = s.pending[:0]
	return nil
}

// keepFed records the tokens a step fed before its context ended: the
// state holds them, so the sequence does too (pending tokens are fed
// first, so they are the first to go).
func (s *Seq) keepFed(fed []int) {
	if len(fed) == 0 {
		return
	}
	s.tokens = append(s.tokens, fed...)
	n := min(len(fed), len(s.pending))
	s.pending = s.pending[:copy(s.pending, s.pending[n:])]
}

// Fork returns a new sequence holding a copy of this one's sequence and
// state; see k3.Session.Fork. The state is copied through a pipe, so the
// copy needs no buffer of the state's size.
func (s *Seq) Fork() (*Seq, error) {
	if err := s.usable("Fork"); err != nil {
		return nil, err
	}
	if s.broken {
		return nil, fmt.Errorf("k3: Fork: session unusable after a failed step; call Reset")
	}
	f := s.e.NewSeq()
	if s.st == nil { // nothing fed yet: only pending tokens, if any
		f.pending = append(f.pending, s.pending...)
		return f, nil
	}
	pr, pw := io.Pipe()
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		var err error
		defer func() { pw.CloseWithError(err) }()
		defer crash.Catch("Fork's state copy", &err)
		err = statefile.Save(pw, s.st, s.e.Fingerprint(), s.tokens, s.pending, s.e.recurrent(s.st, false))
	}()
	err := f.Load(pr, -1)
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if Load gave up early
	// The writer reads this sequence's state until it returns: wait, or a
	// step the caller makes next would race with it.
	<-saved
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("k3: Fork: %w", err)
	}
	return f, nil
}

// recurrent streams st's recurrent arrays for a state file, whole, from
// or to every rank that holds heads of them (model.Model.EachRecurrent).
func (e *Engine) recurrent(st *model.State, fill bool) statefile.Recurrent {
	return func(fn func(v []float32) error) error {
		return e.m.EachRecurrent(context.Background(), st, fill, fn)
	}
}

// Save writes the sequence's state and tokens (statefile format).
func (s *Seq) Save(w io.Writer) error {
	if err := s.usable("Save"); err != nil {
		return err
	}
	if s.broken {
		return fmt.Errorf("k3: Save: session unusable after a failed step; call Reset")
	}
	st, err := s.state()
	if err != nil {
		return err
	}
	if err := statefile.Save(w, st, s.e.Fingerprint(), s.tokens, s.pending, s.e.recurrent(st, false)); err != nil {
		return fmt.Errorf("k3: saving session: %w", err)
	}
	return nil
}

// Load replaces the sequence with one written by Save; size is the
// stream's length, checked exactly against the header when known (≥ 0).
// On error the sequence is empty and usable.
func (s *Seq) Load(r io.Reader, size int64) error {
	if err := s.usable("Load"); err != nil {
		return err
	}
	st, err := s.state()
	if err != nil {
		return fmt.Errorf("k3: loading session: %w", err)
	}
	tokens, pending, err := statefile.Load(r, size, st, s.e.Fingerprint(), s.e.recurrent(st, true))
	s.tokens, s.pending = s.tokens[:0], s.pending[:0]
	s.sq.Reset()
	s.broken = false
	if err != nil {
		return fmt.Errorf("k3: loading session: %w", err)
	}
	s.tokens = append(s.tokens, tokens...)
	s.pending = append(s.pending, pending...)
	return nil
}

// SpecCounts returns the drafted tokens the sequence's speculative steps
// verified and how many of them were accepted, since it was created.
func (s *Seq) SpecCounts() (drafted, accepted int64) { return s.specDrafted, s.specAccepted }

// Closed reports whether Close was called.
func (s *Seq) Closed() bool { return s.closed }
