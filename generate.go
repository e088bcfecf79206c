package k3

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/engine"
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
	// Speculate turns on speculative decoding: the pending token and
	// drafted tokens are rows of one pass, so the weights are read once for
	// all of them, and the tokens are picked row by row with this
	// generation's sampler while they equal the drafts. The tokens are
	// exactly those of plain decoding, greedy or sampled, alone or in a
	// batch, constrained or not; only the speed changes. SpeculateAuto
	// verifies, pass by pass, the drafts that make the pass yield the most
	// tokens per second (none where rows cost more than they return; see
	// SpeculateAuto); a number N verifies up to N drafts whenever the
	// drafter has any, whatever they cost (for tests and benchmarks). Zero
	// decodes one token per pass. Under a RAM budget it needs
	// Options.Speculate: a number may not exceed it, and SpeculateAuto
	// decodes plainly without it.
	Speculate int
	// Drafter proposes the drafts; nil means the built-in drafter: the
	// longest earlier match of the sequence's end, in the sequence itself
	// or in the model's recent outputs (every session's), and the tokens
	// that followed it there, with the match's length as the evidence
	// SpeculateAuto weighs. A Drafter of the caller's gives no evidence:
	// SpeculateAuto then learns its acceptance by draft position alone.
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
	// Constraint, if not nil, restricts every generated token to those its
	// grammar allows: package grammar compiles a JSON Schema, any JSON
	// object or a regular expression (or a grammar of your own
	// implementing grammar.Constraint) against Model.GrammarVocab. The
	// mask is applied to the logits before penalties, temperature, top-k
	// and top-p, so greedy decoding takes the best allowed token; once the
	// output may end, StopTokens are allowed too, and when the grammar is
	// complete the generation ends. Speculation and batching keep their
	// exactness: the tokens are those of constrained decoding alone. If
	// MaxTokens runs out first, the output is what was generated,
	// incomplete. A Conversation sets it from its chat options (response
	// format, tool choice, strict tools) when it is nil.
	Constraint grammar.Constraint

	// fullRecompute, a test oracle (export_test.go), re-runs a fresh
	// forward over the whole sequence for every token instead of carrying
	// the state: slow, and bit-identical to incremental decoding.
	fullRecompute bool
}

// SpeculateAuto, as GenerateOptions.Speculate, lets the engine choose
// before every pass how many drafted tokens the generation verifies, zero
// included, to make the most tokens per second: each drafted token's
// chance of being accepted (learned from how this generation's drafts and
// the model's earlier ones fared, by how long the match behind the draft
// is) against what its row adds to the pass (the experts it routes to
// beyond the pass's other rows, its compute; the trunk is read once per
// pass whatever its rows). Where rows cost more than they return (every
// weight resident, large batches) it verifies nothing. As
// Options.Speculate it reserves the memory for it.
const SpeculateAuto = -1

// AutoDraft is the most drafted tokens SpeculateAuto verifies in a pass.
const AutoDraft = 8

// MaxSpeculate is the most drafted tokens any step verifies: a larger
// GenerateOptions.Speculate drafts this many.
const MaxSpeculate = 16

// The engine uses the same values.
var (
	_ = [1]struct{}{}[SpeculateAuto-engine.SpeculateAuto]
	_ = [1]struct{}{}[AutoDraft-engine.AutoDraft]
	_ = [1]struct{}{}[MaxSpeculate-engine.MaxSpeculate]
)

// MaxTopLogprobs bounds GenerateOptions.TopLogprobs.
const MaxTopLogprobs = 20

// The engine checks the same bound.
var _ = [1]struct{}{}[MaxTopLogprobs-engine.MaxTopLogprobs]

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
//
// A small draft model plugs in here: its Draft runs the draft model over
// seq (keeping its own state between calls: seq only grows by the tokens
// accepted, so a drafter can feed just the new ones, and restart when
// seq is not a continuation of the last one) and appends its greedy
// continuation. Draft is called on the generation's goroutine before
// every decoding step, so it should take a small fraction of a pass.
// With SpeculateAuto the engine learns how often the drafter's tokens are
// accepted at each draft position, from every draft (verified or not:
// the tokens that follow tell), and verifies the ones worth their rows.
type Drafter interface {
	// Draft appends to dst up to max tokens that may follow seq (the
	// sequence so far, generated tokens included) and returns it. It must
	// not keep seq.
	Draft(seq []int, max int, dst []int) []int
}

// NGramDrafter drafts by prompt lookup: it finds the latest earlier place
// where the sequence's last n tokens occurred (n from MaxN down to 1) and
// proposes what followed them there. It suits text that repeats its
// context: code edits, quotations, structured output. (The built-in
// drafter, GenerateOptions.Drafter nil, finds the longest match instead,
// and looks in the model's recent outputs too.)
type NGramDrafter struct {
	// MaxN is the longest suffix matched; zero means 3.
	MaxN int
}

// Draft implements Drafter.
func (d NGramDrafter) Draft(seq []int, max int, dst []int) []int {
	return engine.NGramDraft(seq, d.MaxN, max, dst)
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

// Generate continues the session with prompt and yields generated tokens
// until MaxTokens, a stop token or string, an error or the caller's break.
// At most one error is yielded, last. The sequence is single-use. The
// generated tokens become part of the session's sequence; the last one is
// pending (fed by the next call).
func (s *Session) Generate(ctx context.Context, prompt []int, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		eo := opts.engineOptions()
		err := s.s.Generate(ctx, prompt, eo, func(t engine.Token) bool {
			return yield(publicToken(t), nil)
		})
		if err != nil {
			yield(Token{}, err)
		}
	}
}

// engineOptions converts the options for the engine.
func (o GenerateOptions) engineOptions() engine.GenOptions {
	eo := engine.GenOptions{MaxTokens: o.MaxTokens, Sampling: engine.Sampling(o.Sampling), StopTokens: o.StopTokens,
		StopStrings: o.StopStrings, Speculate: o.Speculate, Logprobs: o.Logprobs, TopLogprobs: o.TopLogprobs,
		Constraint: o.Constraint, FullRecompute: o.fullRecompute}
	if o.Drafter != nil {
		eo.Drafter = o.Drafter
	}
	return eo
}

// publicToken copies an engine token; its top logprobs are the engine's
// buffer, so they are copied into a new slice.
func publicToken(t engine.Token) Token {
	out := Token{ID: t.ID, Index: t.Index, Text: t.Text, Logprob: t.Logprob}
	if t.TopLogprobs != nil {
		out.TopLogprobs = make([]TokenLogprob, len(t.TopLogprobs))
		for i, lp := range t.TopLogprobs {
			out.TopLogprobs[i] = TokenLogprob(lp)
		}
	}
	return out
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
