package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// completionRequest is a POST /v1/completions body.
type completionRequest struct {
	wire.Params
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      bool            `json:"echo"`
	Logprobs  *int            `json:"logprobs"`
	Suffix    *string         `json:"suffix"`
	BestOf    *int            `json:"best_of"`
}

// completionLogprobs are the legacy completions' logprobs, for one choice
// (or, streamed, for the tokens of one chunk).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

// parsePrompt reads "prompt": a string, an array of one string, an array
// of token ids, or an array of one array of ids. A text too long to fit
// the context whatever it tokenizes to is refused before it is tokenized.
func (s *Server) parsePrompt(raw json.RawMessage) ([]int, *wire.APIError) {
	var str string
	var strs []string
	var ids []int
	var idss [][]int
	text := func(t string) ([]int, *wire.APIError) {
		if len(t) > s.opts.MaxContext*s.maxTokenBytes {
			return nil, wire.BadRequest("prompt", "context_length_exceeded", "the prompt (%d bytes) is longer than the context of %d tokens can hold", len(t), s.opts.MaxContext)
		}
		return s.tok.Encode(t), nil
	}
	var e *wire.APIError
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, wire.BadRequest("prompt", "", "prompt is required")
	case json.Unmarshal(raw, &str) == nil:
		ids, e = text(str)
	case json.Unmarshal(raw, &strs) == nil:
		if len(strs) != 1 {
			return nil, wire.BadRequest("prompt", "", "one prompt per request (got %d)", len(strs))
		}
		ids, e = text(strs[0])
	case json.Unmarshal(raw, &ids) == nil:
	case json.Unmarshal(raw, &idss) == nil:
		if len(idss) != 1 {
			return nil, wire.BadRequest("prompt", "", "one prompt per request (got %d)", len(idss))
		}
		ids = idss[0]
	default:
		return nil, wire.BadRequest("prompt", "", "prompt must be a string, an array of strings or an array of token ids")
	}
	if e != nil {
		return nil, e
	}
	if len(ids) == 0 {
		return nil, wire.BadRequest("prompt", "", "the prompt is empty")
	}
	for _, id := range ids {
		if id < 0 || id >= s.m.Config().Vocab {
			return nil, wire.BadRequest("prompt", "", "token id %d is outside the vocabulary [0, %d)", id, s.m.Config().Vocab)
		}
	}
	return ids, nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req completionRequest
		if e := s.decode(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		switch {
		case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > k3.MaxTopLogprobs):
			writeAPIError(w, wire.BadRequest("logprobs", "", "logprobs must be between 0 and %d", k3.MaxTopLogprobs))
			return nil
		case req.Suffix != nil && *req.Suffix != "":
			writeAPIError(w, wire.Unsupported("suffix", "suffix (fill in the middle) is not supported by this server"))
			return nil
		case req.BestOf != nil && *req.BestOf != 1:
			writeAPIError(w, wire.Unsupported("best_of", "best_of is not supported by this server; use n for several choices"))
			return nil
		}
		prompt, e := s.parsePrompt(req.Prompt)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		opts, n, e := s.options(&req.Params, len(prompt), req.MaxTokens, 16)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		if req.Logprobs != nil {
			opts.Logprobs, opts.TopLogprobs = true, *req.Logprobs
		}
		req.Prompt = nil // the body's memory goes before the request waits
		return func(ctx context.Context) { s.complete(ctx, w, &req, prompt, n, opts) }
	})
}

// logprobsOf appends the logprobs of token t, at byte offset off of the
// choice's text, to lp.
func (s *Server) logprobsOf(lp *completionLogprobs, t k3.Token, off int) int {
	text, _ := s.tokenText(t.ID)
	lp.Tokens = append(lp.Tokens, text)
	lp.TokenLogprobs = append(lp.TokenLogprobs, t.Logprob)
	top := make(map[string]float32, len(t.TopLogprobs))
	for _, a := range t.TopLogprobs {
		at, _ := s.tokenText(a.ID)
		if _, dup := top[at]; !dup {
			top[at] = a.Logprob
		}
	}
	lp.TopLogprobs = append(lp.TopLogprobs, top)
	lp.TextOffset = append(lp.TextOffset, off)
	return off + len(text)
}

func (s *Server) complete(ctx context.Context, w http.ResponseWriter, req *completionRequest, prompt []int, n int, opts k3.GenerateOptions) {
	echo := ""
	if req.Echo {
		echo = s.tok.DecodeLenient(prompt)
	}
	resp := completionResponse{ID: wire.NewID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: s.opts.Name}
	if !req.Stream {
		lps := make([]*completionLogprobs, n)
		offs := make([]int, n)
		var emit func(int, k3.Token) error
		if opts.Logprobs {
			for i := range lps {
				lps[i] = &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
				offs[i] = len(echo)
			}
			emit = func(i int, t k3.Token) error {
				if !isStop(&opts, t.ID) {
					offs[i] = s.logprobsOf(lps[i], t, offs[i])
				}
				return nil
			}
		}
		res, err := s.generate(ctx, genInput{prompt: prompt, n: n, opts: opts}, emit)
		if err != nil {
			writeAPIError(w, s.serverError(err))
			return
		}
		for i, q := range res.seqs {
			resp.Choices = append(resp.Choices, completionChoice{Index: i, Text: echo + q.text.String(), Logprobs: lps[i], FinishReason: &q.finish})
		}
		resp.Usage = res.usage()
		wire.WriteJSON(w, http.StatusOK, resp)
		return
	}
	stream := wire.StartSSE(w)
	chunk := func(i int, text string, lp *completionLogprobs, finish *string) error {
		resp.Choices = []completionChoice{{Index: i, Text: text, Logprobs: lp, FinishReason: finish}}
		return stream.Send(resp)
	}
	offs := make([]int, n)
	for i := range n {
		offs[i] = len(echo)
		if echo != "" && chunk(i, echo, nil, nil) != nil {
			return
		}
	}
	res, err := s.generate(ctx, genInput{prompt: prompt, n: n, opts: opts}, func(i int, t k3.Token) error {
		var lp *completionLogprobs
		if opts.Logprobs && !isStop(&opts, t.ID) {
			lp = &completionLogprobs{}
			offs[i] = s.logprobsOf(lp, t, offs[i])
		}
		if t.Text == "" && lp == nil {
			return nil
		}
		return chunk(i, t.Text, lp, nil)
	})
	if err != nil {
		if ctx.Err() == nil || context.Cause(ctx) != context.Canceled {
			stream.Fail(s.serverError(err))
		}
		return
	}
	for i, q := range res.seqs {
		if chunk(i, "", nil, &q.finish) != nil {
			return
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		resp.Choices = []completionChoice{}
		resp.Usage = res.usage()
		stream.Send(resp)
	}
	stream.Done()
}
