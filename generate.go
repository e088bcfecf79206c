package k3

import (
	"context"
	"fmt"
	"iter"
	"slices"
)

// Mode selects how Generate carries state between tokens.
type Mode int

const (
	// Incremental prefills the prompt once and then feeds one token per
	// step, carrying the KDA state, conv histories and MLA cache. The
	// default.
	Incremental Mode = iota
	// FullRecompute re-runs a fresh forward over the whole sequence for
	// every token. It is slow and exists to check Incremental.
	FullRecompute
)

// GenerateOptions configure one generation.
type GenerateOptions struct {
	// MaxTokens bounds the number of generated tokens; zero means 256.
	MaxTokens int
	// Mode selects incremental decoding (default) or full recompute.
	Mode Mode
	// Sampling chooses tokens; the zero value is greedy.
	Sampling SamplingOptions
	// StopTokens end the generation after the first of them is produced
	// (the stop token is yielded).
	StopTokens []int
}

// Token is one generated token.
type Token struct {
	ID int
	// Index counts generated tokens from 0.
	Index int
}

const defaultMaxTokens = 256

// Generate continues the session with prompt and yields generated tokens
// until MaxTokens, a stop token, an error or the caller's break. At most
// one error is yielded, last. The sequence is single-use. After a break
// the session holds the prompt and every token yielded except the last
// (which has not been fed yet).
func (s *Session) Generate(ctx context.Context, prompt []int, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		if err := s.generate(ctx, prompt, opts, yield); err != nil {
			yield(Token{}, err)
		}
	}
}

func (s *Session) generate(ctx context.Context, prompt []int, opts GenerateOptions, yield func(Token, error) bool) error {
	if len(prompt) == 0 && s.Len() == 0 {
		return fmt.Errorf("k3: Generate: %w: empty prompt", ErrBadOptions)
	}
	if err := opts.Sampling.validate(); err != nil {
		return fmt.Errorf("k3: Generate: %w: %v", ErrBadOptions, err)
	}
	if opts.MaxTokens < 0 {
		return fmt.Errorf("k3: Generate: %w: MaxTokens %d is negative", ErrBadOptions, opts.MaxTokens)
	}
	maxTokens := opts.MaxTokens
	if maxTokens == 0 {
		maxTokens = defaultMaxTokens
	}
	V := s.m.m.Cfg.Vocab
	for _, id := range opts.StopTokens {
		if id < 0 || id >= V {
			return fmt.Errorf("k3: Generate: %w: stop token %d outside [0, %d)", ErrTokenOutOfRange, id, V)
		}
	}
	smp := newSampler(opts.Sampling, V)
	for _, id := range s.tokens {
		smp.observe(id)
	}
	for _, id := range prompt {
		smp.observe(id)
	}
	var seq []int
	if opts.Mode == FullRecompute {
		seq = append(slices.Clone(s.tokens), prompt...)
	}
	feed := prompt
	var one [1]int // the next token to feed, without allocating per token
	for i := 0; i < maxTokens; i++ {
		var logits []float32
		var err error
		if opts.Mode == FullRecompute {
			s.Reset()
			logits, err = s.Step(ctx, seq)
		} else if len(feed) > 0 {
			logits, err = s.Step(ctx, feed)
		} else {
			// Continuing a session without a new prompt: recompute the
			// logits of its last token is impossible without state, so
			// the caller must supply at least one token.
			return fmt.Errorf("k3: Generate: %w: empty prompt", ErrBadOptions)
		}
		if err != nil {
			return err
		}
		id := smp.pick(logits)
		smp.observe(id)
		if !yield(Token{ID: id, Index: i}, nil) {
			return nil
		}
		if slices.Contains(opts.StopTokens, id) {
			return nil
		}
		if opts.Mode == FullRecompute {
			seq = append(seq, id)
		}
		one[0] = id
		feed = one[:]
	}
	return nil
}

// Generate runs a fresh session over prompt and yields generated tokens;
// see Session.Generate. Concurrent calls are safe: each has its own
// session.
func (m *Model) Generate(ctx context.Context, prompt []int, opts GenerateOptions) iter.Seq2[Token, error] {
	return m.NewSession().Generate(ctx, prompt, opts)
}
