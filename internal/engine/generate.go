package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tokenizer"
)

// GenOptions configure one generation; they are k3.GenerateOptions, see
// its fields' documentation.
type GenOptions struct {
	MaxTokens   int
	Sampling    Sampling
	StopTokens  []int
	StopStrings []string
	Speculate   int     // drafts per step: a number, SpeculateAuto, or 0 (none)
	Drafter     Drafter // nil: the built-in one (draft.Propose over the sequence and the recent outputs)
	Logprobs    bool
	TopLogprobs int
	// Constraint, if not nil, restricts every token to those its grammar
	// allows (see package grammar); StopTokens are allowed too once the
	// output may end.
	Constraint grammar.Constraint
	// FullRecompute, a test oracle, re-runs a fresh forward over the whole
	// sequence for every token instead of carrying the state: slow, and
	// bit-identical to incremental decoding.
	FullRecompute bool
}

// MaxTopLogprobs bounds GenOptions.TopLogprobs.
const MaxTopLogprobs = 20

// DefaultMaxTokens is the generation length when GenOptions.MaxTokens is
// zero.
const DefaultMaxTokens = 256

// TokenLogprob is a token id and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// Token is one generated token; see k3.Token. TopLogprobs is the
// generation's own buffer, valid until the next token: copy it to keep it.
type Token struct {
	ID, Index   int
	Text        string
	Logprob     float32
	TopLogprobs []TokenLogprob
}

// A Drafter proposes tokens that may follow a sequence, for speculative
// decoding (k3.Drafter has the same method, so a k3.Drafter is one).
type Drafter = specpolicy.Drafter

// NGramDraft drafts by prompt lookup: it finds the latest earlier place
// where the sequence's last n tokens occurred (n from maxN down to 1) and
// appends to dst up to max tokens that followed them there.
func NGramDraft(seq []int, maxN, max int, dst []int) []int {
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

// Generate continues the sequence with prompt and calls yield with every
// generated token until MaxTokens, a stop token or string, an error or
// yield's false; see k3.Session.Generate. The generated tokens become part
// of the sequence; the last one is pending (fed by the next call).
func (s *Seq) Generate(ctx context.Context, prompt []int, opts GenOptions, yield func(Token) bool) error {
	if err := s.usable("Generate"); err != nil {
		return err
	}
	err := s.generate(ctx, prompt, opts, yield)
	if err == nil && !opts.FullRecompute {
		s.keepReply()
	}
	return err
}

// keepReply saves the state after a generation to the prefix cache (the
// blocks of the reply and the state at its end, without logits): a
// conversation's next turn resends the reply, and restores it instead of
// computing it again, up to where its rendering differs from the tokens
// generated (a tokenization the model did not choose, arguments written
// back another way).
func (s *Seq) keepReply() {
	pc := s.e.prefix
	if pc == nil || s.broken || s.st == nil || s.replyFrom <= 0 || len(s.tokens)-s.replyFrom < minPrefixTokens {
		return
	}
	pc.save(s.st, pc.store.Prompt(s.tokens), s.replyFrom, len(s.tokens), nil)
}

func (s *Seq) generate(ctx context.Context, prompt []int, opts GenOptions, yield func(Token) bool) error {
	if len(prompt) == 0 && len(s.pending) == 0 {
		return fmt.Errorf("k3: Generate: %w: empty prompt", ErrBadOptions)
	}
	if err := opts.Sampling.Validate(); err != nil {
		return fmt.Errorf("k3: Generate: %w: %v", ErrBadOptions, err)
	}
	if opts.MaxTokens < 0 {
		return fmt.Errorf("k3: Generate: %w: MaxTokens %d is negative", ErrBadOptions, opts.MaxTokens)
	}
	maxTokens := opts.MaxTokens
	if maxTokens == 0 {
		maxTokens = DefaultMaxTokens
	}
	V := s.e.m.Cfg.Vocab
	for _, id := range opts.StopTokens {
		if id < 0 || id >= V {
			return fmt.Errorf("k3: Generate: %w: stop token %d outside [0, %d)", model.ErrTokenOutOfRange, id, V)
		}
	}
	tok := s.e.tok
	for _, st := range opts.StopStrings {
		if st == "" {
			return fmt.Errorf("k3: Generate: %w: empty stop string", ErrBadOptions)
		}
	}
	if len(opts.StopStrings) > 0 && tok == nil {
		return fmt.Errorf("k3: Generate: %w: stop strings need a tokenizer", ErrNoTokenizer)
	}
	if opts.TopLogprobs < 0 || opts.TopLogprobs > MaxTopLogprobs {
		return fmt.Errorf("k3: Generate: %w: TopLogprobs %d is outside [0, %d]", ErrBadOptions, opts.TopLogprobs, MaxTopLogprobs)
	}
	spec, err := s.newSpeculator(opts)
	if err != nil {
		return err
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
	if opts.FullRecompute {
		seq = append(append(slices.Clone(s.tokens), s.pending...), prompt...)
	}
	var text *textStream
	if tok != nil {
		text = &textStream{dec: tok.NewStreamDecoder(), stops: opts.StopStrings}
	}
	var top []TokenLogprob
	if opts.Logprobs && opts.TopLogprobs > 0 {
		top = make([]TokenLogprob, 0, opts.TopLogprobs)
	}
	// pick chooses a token from a position's logits: under the
	// constraint's mask when there is one.
	var gd *guide
	if opts.Constraint != nil {
		gd = newGuide(s.e, opts.Constraint, V, opts.StopTokens)
	}
	pick := func(logits []float32) (int, error) {
		if gd != nil {
			return gd.pick(smp, logits)
		}
		return smp.pick(logits), nil
	}
	// emit records one generated token, picked from logits, and yields
	// it; it reports whether generation goes on.
	i := 0
	var gerr error // the constraint refused a token: a bug, reported last
	emit := func(id int, logits []float32) bool {
		done := false
		if gd != nil {
			var err error
			if done, err = gd.accept(id); err != nil {
				gerr = err
				return false
			}
		}
		smp.observe(id)
		stopTok := slices.Contains(opts.StopTokens, id)
		last := stopTok || done || i == maxTokens-1
		t := Token{ID: id, Index: i}
		if opts.Logprobs {
			t.Logprob, t.TopLogprobs = logprobs(logits, id, top[:0], opts.TopLogprobs)
		}
		stopped := false
		if text != nil {
			t.Text, stopped = text.add(id, stopTok, last)
		}
		s.pending = append(s.pending[:0], id)
		if opts.FullRecompute {
			seq = append(seq, id)
		}
		i++
		return yield(t) && !stopTok && !stopped && !done && i < maxTokens
	}
	if spec != nil {
		defer func() { s.noteOutput(spec, i) }()
	}
	feed := prompt
	for i < maxTokens {
		if spec != nil && len(feed) == 0 && len(s.pending) == 1 {
			ran, goOn, err := s.speculate(ctx, spec, pick, emit)
			if err != nil {
				return err
			}
			if ran {
				if !goOn {
					return gerr
				}
				continue
			}
		}
		var logits []float32
		var err error
		if opts.FullRecompute {
			s.Reset()
			logits, err = s.Step(ctx, seq)
		} else {
			logits, err = s.Step(ctx, feed)
		}
		if err != nil {
			return err
		}
		id, err := pick(logits)
		if err != nil {
			return err
		}
		if !emit(id, logits) {
			return gerr
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
