package k3

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/k3go/k3/tokenizer"
)

// GenerateOptions configure one generation.
type GenerateOptions struct {
	// MaxTokens bounds the number of generated tokens; zero means 256.
	MaxTokens int
	// Sampling chooses tokens; the zero value is greedy.
	Sampling SamplingOptions
	// StopTokens end the generation once one of them is produced; the stop
	// token is yielded (with no text) and stays pending in the session.
	StopTokens []int
	// StopStrings end the generation once the generated text contains one
	// of them, even across token boundaries. The stop string and anything
	// after it are not part of any yielded Token.Text; text that could be
	// the start of a stop string is held back until it is clear. Needs the
	// model's tokenizer.
	StopStrings []string
	// Speculate is the most drafted tokens one step verifies (speculative
	// decoding): the pending token and up to Speculate drafts are rows of
	// one pass, so the weights are read once for all of them, and the
	// tokens are picked row by row with this generation's sampler while
	// they equal the drafts. The tokens are exactly those of plain
	// decoding, greedy or sampled; only the speed changes. The draft length
	// adapts to how many drafts are accepted and drops to none while
	// drafts keep failing. Zero decodes one token per pass. Under a RAM
	// budget it may not exceed Options.Speculate.
	Speculate int
	// Drafter proposes the drafts; nil means an NGramDrafter (prompt
	// lookup over the sequence so far).
	Drafter Drafter
	// Logprobs fills every Token's Logprob: the log-probability of the
	// token under the model's own distribution (log-softmax of the logits
	// before penalties, temperature and truncation), as OpenAI reports it.
	Logprobs bool
	// TopLogprobs, with Logprobs, also fills Token.TopLogprobs with the
	// that many most likely tokens of the same distribution (at most
	// MaxTopLogprobs). Generation allocates nothing for either unless
	// asked.
	TopLogprobs int

	// fullRecompute, a test oracle (export_test.go), re-runs a fresh
	// forward over the whole sequence for every token instead of carrying
	// the state: slow, and bit-identical to incremental decoding.
	fullRecompute bool
}

// MaxTopLogprobs bounds GenerateOptions.TopLogprobs.
const MaxTopLogprobs = 20

// TokenLogprob is a token id and its log-probability.
type TokenLogprob struct {
	// ID is a token id.
	ID int
	// Logprob is its log-probability (natural log, at most 0).
	Logprob float32
}

// A Drafter proposes tokens that may follow a sequence, for speculative
// decoding (GenerateOptions.Speculate). A draft decides only the speed:
// every drafted token is checked against the model.
type Drafter interface {
	// Draft appends to dst up to max tokens that may follow seq (the
	// sequence so far, generated tokens included) and returns it. It must
	// not keep seq.
	Draft(seq []int, max int, dst []int) []int
}

// NGramDrafter drafts by prompt lookup: it finds the latest earlier place
// where the sequence's last n tokens occurred (n from MaxN down to 1) and
// proposes what followed them there. It suits text that repeats its
// context: code edits, quotations, structured output.
type NGramDrafter struct {
	// MaxN is the longest suffix matched; zero means 3.
	MaxN int
}

// Draft implements Drafter.
func (d NGramDrafter) Draft(seq []int, max int, dst []int) []int {
	maxN := d.MaxN
	if maxN <= 0 {
		maxN = 3
	}
	for n := min(maxN, len(seq)-1); n >= 1; n-- {
		suffix := seq[len(seq)-n:]
		for i := len(seq) - n - 1; i >= 0; i-- {
			if slices.Equal(seq[i:i+n], suffix) {
				end := min(i+n+max, len(seq))
				return append(dst, seq[i+n:end]...)
			}
		}
	}
	return dst
}

// Token is one generated token.
type Token struct {
	// ID is the token's id in the vocabulary, [0, Config.Vocab).
	ID int
	// Index counts generated tokens from 0.
	Index int
	// Text is the text this token adds to the output, when the model has a
	// tokenizer: whole UTF-8 characters only (a character split across
	// tokens comes out with the token that completes it), and nothing that
	// is or may become part of a stop string. It may be empty.
	Text string
	// Logprob is the token's log-probability (GenerateOptions.Logprobs;
	// zero otherwise).
	Logprob float32
	// TopLogprobs are the most likely tokens at this position, most likely
	// first, lower id first on ties (GenerateOptions.TopLogprobs; nil
	// otherwise). A new slice per token.
	TopLogprobs []TokenLogprob
}

const defaultMaxTokens = 256

// Generate continues the session with prompt and yields generated tokens
// until MaxTokens, a stop token or string, an error or the caller's break.
// At most one error is yielded, last. The sequence is single-use. The
// generated tokens become part of the session's sequence; the last one is
// pending (fed by the next call).
func (s *Session) Generate(ctx context.Context, prompt []int, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		if err := s.generate(ctx, prompt, opts, yield); err != nil {
			yield(Token{}, err)
		}
	}
}

func (s *Session) generate(ctx context.Context, prompt []int, opts GenerateOptions, yield func(Token, error) bool) error {
	if err := s.usable("Generate"); err != nil {
		return err
	}
	if len(prompt) == 0 && len(s.pending) == 0 {
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
	tok := s.m.tok
	for _, st := range opts.StopStrings {
		if st == "" {
			return fmt.Errorf("k3: Generate: %w: empty stop string", ErrBadOptions)
		}
	}
	if len(opts.StopStrings) > 0 && tok == nil {
		return fmt.Errorf("k3: Generate: %w: stop strings need a tokenizer", ErrNoTokenizer)
	}
	if opts.Speculate < 0 {
		return fmt.Errorf("k3: Generate: %w: Speculate %d is negative", ErrBadOptions, opts.Speculate)
	}
	if opts.Speculate > 0 && opts.fullRecompute {
		return fmt.Errorf("k3: Generate: %w: Speculate needs incremental decoding", ErrBadOptions)
	}
	if opts.TopLogprobs < 0 || opts.TopLogprobs > MaxTopLogprobs {
		return fmt.Errorf("k3: Generate: %w: TopLogprobs %d is outside [0, %d]", ErrBadOptions, opts.TopLogprobs, MaxTopLogprobs)
	}
	if s.m.opts.RAMBudget > 0 && opts.Speculate > s.m.opts.Speculate {
		return fmt.Errorf("k3: Generate: %w: Speculate %d exceeds Options.Speculate %d, the drafts the RAM budget reserves room for", ErrBadOptions, opts.Speculate, s.m.opts.Speculate)
	}
	smp := newSampler(opts.Sampling, V)
	for _, id := range s.tokens {
		smp.observe(id)
	}
	for _, id := range s.pending {
		smp.observe(id)
	}
	for _, id := range prompt {
		smp.observe(id)
	}
	var seq []int
	if opts.fullRecompute {
		seq = append(append(slices.Clone(s.tokens), s.pending...), prompt...)
	}
	var text *textStream
	if tok != nil {
		text = &textStream{dec: tok.NewStreamDecoder(), stops: opts.StopStrings}
	}
	// emit records one generated token, picked from logits, and yields
	// it; it reports whether generation goes on.
	i := 0
	emit := func(id int, logits []float32) bool {
		smp.observe(id)
		stopTok := slices.Contains(opts.StopTokens, id)
		last := stopTok || i == maxTokens-1
		t := Token{ID: id, Index: i}
		if opts.Logprobs {
			t.Logprob, t.TopLogprobs = logprobs(logits, id, opts.TopLogprobs)
		}
		stopped := false
		if text != nil {
			t.Text, stopped = text.add(id, stopTok, last)
		}
		s.pending = append(s.pending[:0], id)
		if opts.fullRecompute {
			seq = append(seq, id)
		}
		i++
		return yield(t, nil) && !stopTok && !stopped && i < maxTokens
	}
	spec := newSpeculator(opts)
	feed := prompt
	for i < maxTokens {
		if spec != nil && len(feed) == 0 && len(s.pending) == 1 {
			ran, goOn, err := s.speculate(ctx, spec, smp, emit)
			if err != nil {
				return err
			}
			if ran {
				if !goOn {
					return nil
				}
				continue
			}
		}
		var logits []float32
		var err error
		if opts.fullRecompute {
			s.Reset()
			logits, err = s.Step(ctx, seq)
		} else {
			logits, err = s.Step(ctx, feed)
		}
		if err != nil {
			return err
		}
		if !emit(smp.pick(logits), logits) {
			return nil
		}
		feed = nil // the pending token is fed by Step
	}
	return nil
}

// textStream turns generated tokens into text: whole UTF-8 characters,
// with stop strings cut out.
type textStream struct {
	dec   *tokenizer.StreamDecoder
	stops []string
	held  string // decoded text not yet yielded
}

// add decodes id (unless it is a stop token, whose text is never shown)
// and returns the text to yield now and whether a stop string was found.
// last says no token follows: everything held is released.
func (ts *textStream) add(id int, stopTok, last bool) (string, bool) {
	if !stopTok {
		d, err := ts.dec.Write(id)
		if err == nil {
			ts.held += d
		}
	}
	if last {
		ts.held += ts.dec.Flush()
	}
	// A complete stop string: yield what precedes the earliest one.
	cut := -1
	for _, st := range ts.stops {
		if i := strings.Index(ts.held, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		out := ts.held[:cut]
		ts.held = ""
		return out, true
	}
	keep := 0
	if !last {
		// Hold back the longest tail that could start a stop string.
		for _, st := range ts.stops {
			for k := min(len(st)-1, len(ts.held)); k > keep; k-- {
				if strings.HasSuffix(ts.held, st[:k]) {
					keep = k
					break
				}
			}
		}
	}
	out := ts.held[:len(ts.held)-keep]
	ts.held = ts.held[len(ts.held)-keep:]
	return out, false
}

// Generate runs a fresh session over prompt and yields generated tokens;
// see Session.Generate. Concurrent calls are safe: each has its own
// session.
func (m *Model) Generate(ctx context.Context, prompt []int, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		s := m.NewSession()
		defer s.Close()
		for t, err := range s.Generate(ctx, prompt, opts) {
			if !yield(t, err) {
				return
			}
		}
	}
}

// GenerateText encodes prompt with the model's tokenizer, generates, and
// returns the generated text.
func (m *Model) GenerateText(ctx context.Context, prompt string, opts GenerateOptions) (string, error) {
	if m.tok == nil {
		return "", fmt.Errorf("k3: GenerateText: %w", ErrNoTokenizer)
	}
	var b strings.Builder
	for t, err := range m.Generate(ctx, m.tok.Encode(prompt), opts) {
		if err != nil {
			return b.String(), err
		}
		b.WriteString(t.Text)
	}
	return b.String(), nil
}
