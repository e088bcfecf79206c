package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/k3go/k3"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// options validates p and turns it into GenerateOptions; maxTokens is nil
// when the request leaves it to the server (def, capped by the room left
// in the context). It returns the number of choices too.
func (s *Server) options(p *wire.Params, promptLen int, maxTokens *int, def int) (k3.GenerateOptions, int, *wire.APIError) {
	o := k3.GenerateOptions{Speculate: s.opts.Speculate}
	if p.Model != "" && p.Model != s.opts.Name {
		e := wire.BadRequest("model", "model_not_found", "the model %q does not exist (this server has %q)", p.Model, s.opts.Name)
		e.Status = http.StatusNotFound
		return o, 0, e
	}
	n := 1
	if p.N != nil {
		n = *p.N
		if n < 1 || n > s.opts.Sessions {
			return o, 0, wire.BadRequest("n", "", "n must be between 1 and %d (the sequences this server generates at once, --sessions)", s.opts.Sessions)
		}
	}
	if len(p.LogitBias) > 0 {
		return o, 0, wire.Unsupported("logit_bias", "logit_bias is not supported by this server")
	}
	room := s.opts.MaxContext - promptLen
	if room <= 0 {
		return o, 0, wire.BadRequest("", "context_length_exceeded", "the prompt has %d tokens; the context holds %d", promptLen, s.opts.MaxContext)
	}
	switch {
	case maxTokens == nil:
		o.MaxTokens = min(def, room)
	case *maxTokens < 1:
		return o, 0, wire.BadRequest("max_tokens", "", "max_tokens must be at least 1")
	case *maxTokens > room:
		return o, 0, wire.BadRequest("max_tokens", "context_length_exceeded",
			"the context holds %d tokens; the prompt has %d and max_tokens asks for %d more", s.opts.MaxContext, promptLen, *maxTokens)
	default:
		o.MaxTokens = *maxTokens
	}
	sp := &o.Sampling
	sp.Temperature, sp.TopP = 1, 1 // the OpenAI defaults
	if p.Temperature != nil {
		if !(*p.Temperature >= 0 && *p.Temperature <= 2) {
			return o, 0, wire.BadRequest("temperature", "", "temperature must be between 0 and 2")
		}
		sp.Temperature = float32(*p.Temperature)
	}
	if p.TopP != nil {
		if !(*p.TopP > 0 && *p.TopP <= 1) {
			return o, 0, wire.BadRequest("top_p", "", "top_p must be in (0, 1]")
		}
		sp.TopP = float32(*p.TopP)
	}
	for _, x := range []struct {
		name string
		v    float64
	}{{"presence_penalty", p.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty}} {
		if !(x.v >= -2 && x.v <= 2) {
			return o, 0, wire.BadRequest(x.name, "", "%s must be between -2 and 2", x.name)
		}
	}
	sp.PresencePenalty, sp.FrequencyPenalty = float32(p.PresencePenalty), float32(p.FrequencyPenalty)
	if p.TopK < 0 {
		return o, 0, wire.BadRequest("top_k", "", "top_k must not be negative")
	}
	if !(p.MinP >= 0 && p.MinP <= 1) {
		return o, 0, wire.BadRequest("min_p", "", "min_p must be in [0, 1]")
	}
	if !(p.RepetitionPenalty >= 0) || math.IsInf(p.RepetitionPenalty, 0) {
		return o, 0, wire.BadRequest("repetition_penalty", "", "repetition_penalty must be a positive number")
	}
	sp.TopK, sp.MinP, sp.RepetitionPenalty = p.TopK, float32(p.MinP), float32(p.RepetitionPenalty)
	if p.Seed != nil {
		sp.Seed = uint64(*p.Seed)
	} else {
		sp.Seed = s.randomSeed()
	}
	stops, err := parseStop(p.Stop)
	if err != nil {
		return o, 0, err
	}
	o.StopStrings = stops
	if !p.IgnoreEOS {
		o.StopTokens = s.eos
	}
	return o, n, nil
}

// parseStop reads "stop": null, a string, or up to 4 strings.
func parseStop(raw json.RawMessage) ([]string, *wire.APIError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	var list []string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, wire.BadRequest("stop", "", "stop must be a string or an array of strings")
	}
	if len(list) > 4 {
		return nil, wire.BadRequest("stop", "", "at most 4 stop sequences")
	}
	for _, s := range list {
		if s == "" {
			return nil, wire.BadRequest("stop", "", "stop sequences must not be empty")
		}
	}
	return list, nil
}

// seqResult is what one sequence (one choice) produced.
type seqResult struct {
	text             strings.Builder
	ids              []int
	completionTokens int
	finish           string // "stop" or "length"
}

// result is what a generation request produced.
type result struct {
	promptTokens int
	// cachedTokens are the prompt tokens the prefix cache supplied instead
	// of a prefill (Session.CachedTokens); every endpoint's usage reports
	// them (chat's prompt_tokens_details.cached_tokens, Responses'
	// input_tokens_details.cached_tokens, Anthropic's
	// cache_read_input_tokens).
	cachedTokens int
	seqs         []*seqResult
	// drafted and accepted are the drafted tokens speculative decoding
	// verified for every choice, and those accepted.
	drafted, accepted int64
}

// genInput is a generation request: n choices of prompt.
type genInput struct {
	prompt []int
	n      int
	opts   k3.GenerateOptions
	// grammar, if not nil, constrains every choice (a constraint each).
	grammar *grammar.Grammar
	// cacheKey groups requests that share a prompt prefix (a Responses or
	// chat completions prompt_cache_key, a previous_response_id's
	// conversation). The prefix
	// cache matches prompts by their tokens and needs no key; the access
	// log carries it, for routing (docs/SCALING.md).
	cacheKey string
	// onStart, if set, is called once the sequences have their places,
	// before the prompt is fed.
	onStart func()
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (r *result) usage() *usage {
	u := &usage{PromptTokens: r.promptTokens}
	for _, q := range r.seqs {
		u.CompletionTokens += q.completionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// generate runs n sequences (choices) of prompt, calling emit with each
// token of choice i as it comes; calls of emit never overlap. It waits for
// n session places first (queued). With n > 1 the prompt is fed once and
// the session forked (Session.Fork), so the choices share its prefill;
// choice i samples with seed + i, so that they differ. An error from emit
// (the client went away) or the end of ctx ends every choice, except
// errEnough, which ends choice i alone as a normal stop.
func (s *Server) generate(ctx context.Context, in genInput, emit func(i int, t k3.Token) error) (*result, error) {
	prompt, n, opts := in.prompt, in.n, in.opts
	s.met.queued.Inc()
	err := s.lim.acquire(ctx, n)
	s.met.queued.Dec()
	if err != nil {
		s.cancelled.Add(1)
		s.met.cancelled.Inc()
		return nil, err
	}
	defer s.lim.release(n)
	if in.onStart != nil {
		in.onStart()
	}
	s.active.Add(1)
	defer s.active.Add(-1)
	s.met.running.Add(float64(n))
	defer s.met.running.Sub(float64(n))
	s.met.prompt.Add(float64(len(prompt)))
	progress, ctx := s.progress.begin(ctx, n*opts.MaxTokens)
	defer s.progress.end(progress)

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	res := &result{promptTokens: len(prompt), seqs: make([]*seqResult, n)}
	var mu sync.Mutex // serialises emit
	var emitErr error
	run := func(i int, tokens func(func(k3.Token, error) bool), o k3.GenerateOptions) error {
		q := &seqResult{finish: "length"}
		res.seqs[i] = q
		stoppedByToken := false
		for t, err := range tokens {
			if err != nil {
				return err
			}
			q.ids = append(q.ids, t.ID)
			q.completionTokens++
			s.met.generated.Inc()
			s.progress.token(progress)
			stoppedByToken = stoppedByToken || slices.Contains(o.StopTokens, t.ID)
			q.text.WriteString(t.Text)
			if emit != nil {
				mu.Lock()
				err := emit(i, t)
				if err == errEnough {
					mu.Unlock()
					q.finish = "stop"
					return nil
				}
				if err != nil && emitErr == nil {
					emitErr = err
				}
				mu.Unlock()
				if err != nil {
					stop(err)
					return err
				}
			}
			if s.afterToken != nil {
				s.afterToken()
			}
		}
		if stoppedByToken || q.completionTokens < o.MaxTokens {
			q.finish = "stop"
		} else if len(o.StopStrings) > 0 {
			// The last token may have completed a stop string.
			all := s.tok.DecodeLenient(q.ids)
			for _, st := range o.StopStrings {
				if strings.Contains(all, st) {
					q.finish = "stop"
				}
			}
		}
		return nil
	}
	var constraints []grammar.Constraint
	if in.grammar != nil {
		v, err := s.m.GrammarVocab()
		if err != nil {
			return res, err
		}
		for range n {
			c, err := in.grammar.Constraint(v)
			if err != nil {
				return res, err
			}
			constraints = append(constraints, c)
		}
	}
	optsFor := func(i int) k3.GenerateOptions {
		o := opts
		o.Sampling.Seed += uint64(i)
		if constraints != nil {
			o.Constraint = constraints[i]
		}
		return o
	}

	var errs []error
	if ids := s.scripted(prompt); ids != nil {
		for i := range n {
			errs = append(errs, run(i, s.scriptedTokens(ids, optsFor(i)), optsFor(i)))
		}
	} else {
		sessions := make([]*k3.Session, n)
		defer func() {
			for _, ss := range sessions {
				if ss != nil {
					ss.Close()
				}
			}
		}()
		tail := prompt
		sessions[0] = s.m.NewSession()
		if n > 1 && len(prompt) > 1 {
			// The shared prefill: every choice then feeds the prompt's last
			// token itself, in one pass together, and samples from its own
			// logits.
			if _, err := sessions[0].Step(ctx, prompt[:len(prompt)-1]); err != nil {
				return res, s.genErr(ctx, err)
			}
			tail = prompt[len(prompt)-1:]
			for i := 1; i < n; i++ {
				f, err := sessions[0].Fork()
				if err != nil {
					return res, s.genErr(ctx, err)
				}
				sessions[i] = f
			}
		} else {
			for i := 1; i < n; i++ {
				sessions[i] = s.m.NewSession()
			}
		}
		errs = make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			o := optsFor(i)
			wg.Go(func() { errs[i] = run(i, sessions[i].Generate(ctx, tail, o), o) })
		}
		wg.Wait()
		// The first session fed the prompt; the forks share what it
		// restored.
		res.cachedTokens = sessions[0].CachedTokens()
		for _, ss := range sessions {
			d, a := ss.Speculation()
			res.drafted += d
			res.accepted += a
		}
		s.met.speculation(res.drafted, res.accepted)
	}
	if info, ok := ctx.Value(genInfoKey{}).(*genInfo); ok {
		info.generated, info.promptTokens, info.cachedTokens, info.cacheKey = true, res.promptTokens, res.cachedTokens, in.cacheKey
		info.drafted, info.accepted = res.drafted, res.accepted
	}
	if emitErr != nil {
		s.cancelled.Add(1)
		s.met.cancelled.Inc()
		return res, emitErr
	}
	for _, err := range errs {
		if err != nil {
			return res, s.genErr(ctx, err)
		}
	}
	return res, nil
}

// genErr is the error a generation ended with: the cause of the context
// when it ended (client gone, deadline, shutdown), else err.
func (s *Server) genErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		s.cancelled.Add(1)
		s.met.cancelled.Inc()
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			return c
		}
		return ctx.Err()
	}
	return err
}

// scripted returns the script hook's ids for prompt, if any.
func (s *Server) scripted(prompt []int) []int {
	if s.script == nil {
		return nil
	}
	return s.script(prompt)
}

// scriptedTokens yields ids as the tokens of a generation, within opts'
// MaxTokens and StopTokens (see Server.script).
func (s *Server) scriptedTokens(ids []int, opts k3.GenerateOptions) func(func(k3.Token, error) bool) {
	return func(yield func(k3.Token, error) bool) {
		dec := s.tok.NewStreamDecoder()
		for k, id := range ids {
			if k == opts.MaxTokens {
				return
			}
			text, _ := dec.Write(id)
			stop := slices.Contains(opts.StopTokens, id)
			if stop {
				text = ""
			}
			if !yield(k3.Token{ID: id, Index: k, Text: text}, nil) || stop {
				return
			}
		}
	}
}

// tokenText is a token's text for logprobs: its bytes as a string (the
// JSON encoder writes invalid UTF-8 as U+FFFD; bytes carries them
// exactly).
func (s *Server) tokenText(id int) (string, []int) {
	b, _ := s.tok.TokenBytes(id)
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return string(b), out
}

// isStop reports whether id ends the generation (a stop token: not part
// of the text, and left out of logprobs).
func isStop(opts *k3.GenerateOptions, id int) bool { return slices.Contains(opts.StopTokens, id) }
