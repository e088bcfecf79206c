package k3

import (
	"context"
	"errors"
	"fmt"

	"github.com/k3go/k3/model"
)

// Session is one sequence: the KDA recurrent state, the short-conv
// histories and the latent MLA cache of everything fed so far. Sessions of
// one Model run independently and may be used from different goroutines;
// one Session is not safe for concurrent use.
type Session struct {
	m      *Model
	s      *model.Session
	tokens []int
	logits []float32
	broken bool // a failed step left the state undefined
}

// NewSession starts an empty sequence with room for Options.MaxContext
// positions.
func (m *Model) NewSession() *Session {
	return &Session{m: m, s: m.m.NewSession(m.opts.MaxContext)}
}

// Len returns the number of tokens consumed.
func (s *Session) Len() int { return len(s.tokens) }

// Tokens returns the tokens consumed so far (a copy).
func (s *Session) Tokens() []int { return append([]int(nil), s.tokens...) }

// Reset empties the session, keeping its allocations.
func (s *Session) Reset() {
	s.s.St.Reset()
	s.tokens = s.tokens[:0]
	s.broken = false
}

// Step appends tokens to the sequence and returns the logits of the last
// position (vocab values). The slice is owned by the session and valid
// until its next call; copy it to keep it. A failed step (cancellation, an
// I/O error, a closed model) leaves the session unusable until Reset.
func (s *Session) Step(ctx context.Context, tokens []int) ([]float32, error) {
	if len(tokens) == 0 {
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
	if len(tokens) == 0 {
		return nil, fmt.Errorf("k3: Logits: %w: no tokens", ErrBadOptions)
	}
	out := make([]float32, len(tokens)*s.m.m.Cfg.Vocab)
	if err := s.forward(ctx, tokens, out, true); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Session) forward(ctx context.Context, tokens []int, out []float32, all bool) error {
	if s.broken {
		return fmt.Errorf("k3: session unusable after a failed step; call Reset")
	}
	for i, t := range tokens {
		if t < 0 || t >= s.m.m.Cfg.Vocab {
			return fmt.Errorf("k3: %w: token %d at index %d is outside [0, %d)", ErrTokenOutOfRange, t, i, s.m.m.Cfg.Vocab)
		}
	}
	if len(s.tokens)+len(tokens) > s.s.St.Cap() {
		return fmt.Errorf("k3: %w: %d + %d tokens exceed MaxContext %d", ErrContextFull, len(s.tokens), len(tokens), s.s.St.Cap())
	}
	if err := s.m.enter(); err != nil {
		return err
	}
	defer s.m.leave()
	if err := s.s.Forward(ctx, tokens, out, all); err != nil {
		s.broken = true
		if errors.Is(err, model.ErrClosed) {
			return fmt.Errorf("k3: %w", ErrClosed)
		}
		return fmt.Errorf("k3: step at position %d: %w", len(s.tokens), err)
	}
	s.tokens = append(s.tokens, tokens...)
	return nil
}
