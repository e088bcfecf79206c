package k3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/k3go/k3/model"
)

// Session is one sequence: the KDA recurrent state, the short-conv
// histories and the latent MLA cache of everything fed so far. Sessions of
// one Model run independently and may be used from different goroutines;
// one Session is not safe for concurrent use.
type Session struct {
	m      *Model
	st     *model.State // nil until the session first needs state
	tokens []int        // fed to the model
	// pending are tokens that belong to the sequence but have not been fed
	// yet: the last token Generate produced. The next Step, Logits or
	// Generate feeds them first.
	pending []int
	feed    []int // scratch for pending + new tokens
	logits  []float32
	broken  bool    // a failed step left the state undefined
	closed  bool    // Close was called: every method fails with ErrClosed
	req     request // its step, as the batcher sees it
	// specRows, set by speculate for one step, makes the step's pass
	// recoverable (model.State.BeginSpeculation); specOut holds its logits.
	specRows int
	specOut  []float32
	// idle is used by the default session (Model.Step) only: true while no
	// Step runs on it, so that it can give its budget place away.
	idle atomic.Bool
}

// NewSession starts an empty sequence with room for Options.MaxContext
// positions. Its state (KDA state, conv histories, MLA cache) is allocated
// when it is first used and released by Close. Under a RAM budget, at most
// Options.Sessions sessions hold state at once: a step of one more fails
// with ErrBudget until another is closed.
func (m *Model) NewSession() *Session {
	return &Session{m: m}
}

// state returns the session's model state, taking a place in the budget
// and allocating it on first use.
func (s *Session) state() (*model.State, error) {
	if s.st != nil {
		return s.st, nil
	}
	if err := s.m.takeSessionSlot(s); err != nil {
		return nil, err
	}
	s.st = model.NewState(s.m.m.Cfg, s.m.opts.MaxContext)
	s.st.Checkpoint, _ = s.m.m.Plan.Fingerprint() // computed at Open
	return s.st, nil
}

// Close releases the session's state and its place in the RAM budget.
// The session is then unusable: every later method fails with ErrClosed
// (Len is 0), and Close again does nothing. Reset is what empties a
// session for reuse.
func (s *Session) Close() {
	s.release()
	s.closed = true
}

// release drops the session's state and sequence and gives its place in
// the budget back; the session stays usable and takes a place again when
// it next needs state (the default session does this to give its place
// away).
func (s *Session) release() {
	if s.st != nil {
		s.st = nil
		s.m.releaseSessionSlot()
	}
	s.tokens, s.pending = s.tokens[:0], s.pending[:0]
	s.broken = false
}

// usable fails with ErrClosed once the session is closed.
func (s *Session) usable(op string) error {
	if s.closed {
		return fmt.Errorf("k3: %s: session %w", op, ErrClosed)
	}
	return nil
}

// Len returns the length of the sequence: tokens fed plus pending ones.
func (s *Session) Len() int { return len(s.tokens) + len(s.pending) }

// Tokens returns the sequence so far (a copy), pending tokens included.
func (s *Session) Tokens() []int {
	return append(append([]int(nil), s.tokens...), s.pending...)
}

// Reset empties the session, keeping its allocations, so that it starts a
// new sequence; it also recovers a session a failed step left unusable.
// On a closed session it does nothing.
func (s *Session) Reset() {
	if s.st != nil {
		s.st.Reset()
	}
	s.tokens = s.tokens[:0]
	s.pending = s.pending[:0]
	s.broken = false
}

// Step appends tokens to the sequence (after any pending ones) and returns
// the logits of the last position (vocab values). The slice is owned by the
// session and valid until its next call; copy it to keep it.
//
// Steps of sessions used from different goroutines at the same time share
// passes over the weights; the results are exactly those of the session
// alone. A step whose context ends while it waits for a pass, or while
// other sessions' steps share its passes, leaves at the next pass
// boundary: the tokens fed so far stay in the sequence (Len counts them)
// and the session stays usable. A step alone in its pass stops at once
// instead, and like any other failed step (an I/O error, a closed model)
// leaves the session unusable until Reset.
func (s *Session) Step(ctx context.Context, tokens []int) ([]float32, error) {
	if err := s.usable("Step"); err != nil {
		return nil, err
	}
	if len(tokens) == 0 && len(s.pending) == 0 {
		return nil, fmt.Errorf("k3: Step: %w: no tokens", ErrBadOptions)
	}
	V := s.m.m.Cfg.Vocab
	if cap(s.logits) < V {
		s.logits = make([]float32, V)
	}
	if err := s.forward(ctx, tokens, s.logits[:V], false); err != nil {
		return nil, err
	}
	return s.logits[:V], nil
}

// Logits appends tokens like Step and returns the logits of every one of
// their positions (len(tokens)×vocab values, position-major; a new slice).
// It is teacher forcing: one forward over the tokens.
func (s *Session) Logits(ctx context.Context, tokens []int) ([]float32, error) {
	if err := s.usable("Logits"); err != nil {
		return nil, err
	}
	if len(tokens) == 0 && len(s.pending) == 0 {
		return nil, fmt.Errorf("k3: Logits: %w: no tokens", ErrBadOptions)
	}
	V := s.m.m.Cfg.Vocab
	out := make([]float32, (len(s.pending)+len(tokens))*V)
	skip := len(s.pending) * V
	if err := s.forward(ctx, tokens, out, true); err != nil {
		return nil, err
	}
	return out[skip:], nil
}

// forward feeds the pending tokens and then tokens.
func (s *Session) forward(ctx context.Context, tokens []int, out []float32, all bool) error {
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
	for i, t := range tokens {
		if t < 0 || t >= s.m.m.Cfg.Vocab {
			return fmt.Errorf("k3: %w: token %d at index %d is outside [0, %d)", ErrTokenOutOfRange, t, i, s.m.m.Cfg.Vocab)
		}
	}
	if len(s.tokens)+len(tokens) > s.m.opts.MaxContext {
		return fmt.Errorf("k3: %w: %d + %d tokens exceed MaxContext %d", ErrContextFull, len(s.tokens), len(tokens), s.m.opts.MaxContext)
	}
	if err := s.m.enter(); err != nil {
		return err
	}
	defer s.m.leave()
	if err := s.m.e.checkFiles(); err != nil {
		return err
	}
	s.m.log.LogAttrs(ctx, slog.LevelDebug, "k3: forward", slog.Int("position", len(s.tokens)), slog.Int("tokens", len(tokens)))
	st, err := s.state()
	if err != nil {
		return err
	}
	// Other sessions' steps share the pass (the batcher); a step whose
	// context ends between passes leaves with what was fed so far.
	if s.specRows > 0 {
		st.BeginSpeculation(s.specRows)
	}
	r := &s.req
	r.ctx, r.st, r.tokens, r.out, r.all = ctx, st, tokens, out, all
	err = s.m.b.do(r)
	if err != nil {
		if r.broken {
			s.broken = true
			if errors.Is(err, model.ErrClosed) {
				return fmt.Errorf("k3: model %w", ErrClosed)
			}
			return fmt.Errorf("k3: step at position %d: %w", len(s.tokens), err)
		}
		s.keepFed(tokens[:r.fed])
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("k3: model %w", ErrClosed)
		}
		return fmt.Errorf("k3: step at position %d: %w", len(s.tokens), err)
	}
	s.tokens = append(s.tokens, tokens...)
	s.pending = s.pending[:0]
	return nil
}

// keepFed records the tokens a step fed before its context ended: the
// state holds them, so the sequence does too (pending tokens are fed
// first, so they are the first to go).
func (s *Session) keepFed(fed []int) {
	if len(fed) == 0 {
		return
	}
	s.tokens = append(s.tokens, fed...)
	n := min(len(fed), len(s.pending))
	s.pending = s.pending[:copy(s.pending, s.pending[n:])]
}

// Fork returns a new session holding a copy of this one's sequence and
// state (pending tokens included), so that several continuations of one
// prompt share its prefill: each fork then continues exactly, bit for
// bit, as this session would. The fork takes its own place in the RAM
// budget (ErrBudget when none is left) and must be closed. The state is
// copied through a pipe, so the copy needs no buffer of the state's size.
func (s *Session) Fork() (*Session, error) {
	if err := s.usable("Fork"); err != nil {
		return nil, err
	}
	if s.broken {
		return nil, fmt.Errorf("k3: Fork: session unusable after a failed step; call Reset")
	}
	f := s.m.NewSession()
	if s.st == nil { // nothing fed yet: only pending tokens, if any
		f.pending = append(f.pending, s.pending...)
		return f, nil
	}
	pr, pw := io.Pipe()
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		pw.CloseWithError(s.st.Save(pw, s.tokens, s.pending))
	}()
	err := f.load(pr, -1)
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if Load gave up early
	// The writer reads this session's state until it returns: wait, or a
	// step the caller makes next would race with it.
	<-saved
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("k3: Fork: %w", err)
	}
	return f, nil
}
