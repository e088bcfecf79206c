package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/server"
)

const benchServeUsage = `--model DIR [--budget SIZE | --preset NAME] [--clients 1,8] [--tokens N] [--prompt-len N] [flags]

Measures the server end to end: it serves the model on loopback with the
same handler as k3 serve and, for each --clients level, that many clients
each stream --requests completions of --tokens tokens (greedy, ignore_eos,
a random prompt of --prompt-len token ids of their own), all at once. The
aggregate tokens/s of a level is every client's tokens over the wall time
from the first request to the last response, prefill included; the ratio
is against the first level, measured in the same process.`

// serveLevel is one --clients level of k3 bench-serve.
type serveLevel struct {
	Clients          int     `json:"clients"`
	Requests         int     `json:"requests"`
	GeneratedTokens  int     `json:"generated_tokens"`
	WallSeconds      float64 `json:"wall_seconds"`
	TokensPerS       float64 `json:"tokens_per_s"`        // aggregate
	ClientTokensPerS float64 `json:"client_tokens_per_s"` // per client
	RatioToFirst     float64 `json:"ratio_to_first"`
	MeanTTFTSeconds  float64 `json:"mean_ttft_seconds"`
	Passes           int64   `json:"passes"`
	RowsPerPass      float64 `json:"rows_per_pass"`
	BytesPerToken    int64   `json:"bytes_read_per_token"`
	PeakRSSBytes     int64   `json:"peak_rss_bytes"`
}

type benchServeResult struct {
	Model       string       `json:"model"`
	BudgetBytes int64        `json:"budget_bytes"`
	LoadSeconds float64      `json:"load_seconds"`
	PromptLen   int          `json:"prompt_len"`
	Tokens      int          `json:"tokens"` // per request
	Sessions    int          `json:"sessions"`
	Levels      []serveLevel `json:"levels"`
}

// RunServe is k3 bench-serve: args are its flags (k3 help bench-serve
// lists them). stdin is not read.
func RunServe(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("bench-serve", benchServeUsage, stderr)
	var mf cli.ModelFlags
	mf.Register(fs)
	tokDir := fs.String("tokenizer", "", "`directory` with tiktoken.model and tokenizer_config.json (default: the checkpoint directory)")
	clients := fs.String("clients", "1,8", "client counts to measure, comma separated; the first is the baseline")
	tokens := fs.Int("tokens", 6, "tokens per request")
	promptLen := fs.Int("prompt-len", 2, "prompt length in token ids")
	requests := fs.Int("requests", 1, "requests each client sends, one after another")
	maxBatch := fs.Int("max-batch", 0, "most token rows per pass (0 = the prefill chunk)")
	seed := fs.Uint64("seed", 1, "seed of the random prompts")
	asJSON := fs.Bool("json", false, "print one JSON object")
	agent := fs.Bool("agent", false, "replay an agent-like trace instead: a --header-token header every turn resends, then the conversation so far and the turn's new message; every turn measured with the prefix cache and without it (--turns, --header, --user-tokens, --reply-tokens; --tokens per turn)")
	turns := fs.Int("turns", 8, "with --agent: turns of the trace")
	header := fs.Int("header", 1500, "with --agent: the header's tokens (system prompt and tool schemas)")
	headerTail := fs.Int("header-tail", 0, "with --agent: the header's last `N` tokens are new every turn (a date, a status line): the cache restores the last checkpoint before them, and the rest of the prompt is computed again")
	userTokens := fs.Int("user-tokens", 60, "with --agent: tokens of each turn's new message")
	replyTokens := fs.Int("reply-tokens", 120, "with --agent: tokens of each reply the trace resends")
	uncachedTurns := fs.String("uncached-turns", "", "with --agent: the `turns` (comma separated, 1-based) also measured without the prefix cache (default: all); an uncached turn prefills its whole prompt, so on a slow model a few of them bound the run's time")
	cli.InputDirs(fs, "tokenizer")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if err := cli.FirstError(cli.Positive("tokens", *tokens), cli.Positive("prompt-len", *promptLen),
		cli.Positive("requests", *requests), cli.NotNegative("max-batch", *maxBatch, "the prefill chunk"),
		cli.NotNegative("header-tail", *headerTail, "none"), cli.NotNegative("reply-tokens", *replyTokens, "none")); err != nil {
		return err
	}
	if *turns < 2 {
		return cli.Usagef("--turns %d: --agent needs at least 2", *turns)
	}
	if err := cli.FirstError(cli.Positive("header", *header), cli.Positive("user-tokens", *userTokens)); err != nil {
		return err
	}
	if *headerTail > *header {
		return cli.Usagef("--header-tail %d: at most --header (%d)", *headerTail, *header)
	}
	only, err := parseTurns(*uncachedTurns, *turns)
	if err != nil {
		return err
	}
	levels, err := cli.ParseBatchSizes(*clients)
	if err != nil {
		return cli.Usagef("--clients %q: want positive client counts, e.g. 1,8", *clients)
	}
	if err := mf.Check(nil); err != nil {
		return err
	}
	if err := cli.CheckCheckpoint(mf.Dir); err != nil {
		return err
	}
	if err := cli.CheckTokenizer(mf.Dir, *tokDir); err != nil {
		return err
	}
	if *agent {
		return runAgent(&mf, agentFlags{uncached: only, turns: *turns, header: *header, tail: *headerTail, tokenizer: *tokDir, user: *userTokens, reply: *replyTokens, tokens: *tokens, seed: *seed, json: *asJSON}, stdout, stderr)
	}
	most := 0
	for _, c := range levels {
		most = max(most, c)
	}
	if mf.MaxContext == 0 {
		mf.MaxContext = *promptLen + *tokens + 8
	}
	start := time.Now()
	m, err := mf.OpenWith(context.Background(), func(o *k3.Options) {
		o.Sessions, o.MaxBatch, o.TokenizerDir = most, *maxBatch, *tokDir
	})
	if err != nil {
		return err
	}
	defer m.Close()
	load := time.Since(start)
	if m.Tokenizer() == nil {
		return cli.Usagef("%s has no tokenizer; give --tokenizer DIR", mf.Dir)
	}
	srv, err := server.New(m, server.Options{Name: "bench", MaxContext: m.MaxContext(), Sessions: most, Queue: most * *requests})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/v1/completions"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: most}}

	res := benchServeResult{Model: filepath.Base(filepath.Clean(mf.Dir)), BudgetBytes: m.Stats().BudgetBytes, LoadSeconds: load.Seconds(),
		PromptLen: *promptLen, Tokens: *tokens, Sessions: most}
	rng := rand.New(rand.NewPCG(*seed, 0x5e7e))
	V := m.Config().Vocab
	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return err
	}
	defer watch.Close()
	stderr = watch.Text(stderr)
	for li, c := range levels {
		watch.Passes(fmt.Sprintf("%d clients", c))
		prompts := make([][]int, c*(*requests))
		for i := range prompts {
			p := make([]int, *promptLen)
			for k := range p {
				p[k] = rng.IntN(V)
			}
			prompts[i] = p
		}
		before := m.Stats()
		var mu sync.Mutex
		var firstErr error
		total, ttft := 0, 0.0
		var wg sync.WaitGroup
		t0 := time.Now()
		for ci := range c {
			wg.Go(func() {
				for r := range *requests {
					n, first, err := streamCompletion(client, url, prompts[ci*(*requests)+r], *tokens)
					mu.Lock()
					total += n
					ttft += first.Seconds()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		wall := time.Since(t0)
		if firstErr != nil {
			return fmt.Errorf("%d clients: %w", c, firstErr)
		}
		d := m.Stats().Sub(before)
		lv := serveLevel{Clients: c, Requests: c * *requests, GeneratedTokens: total, WallSeconds: wall.Seconds(),
			TokensPerS: float64(total) / wall.Seconds(), MeanTTFTSeconds: ttft / float64(c**requests),
			Passes: d.Passes, PeakRSSBytes: d.PeakRSSBytes}
		lv.ClientTokensPerS = lv.TokensPerS / float64(c)
		if d.Passes > 0 {
			lv.RowsPerPass = float64(d.Rows) / float64(d.Passes)
		}
		if total > 0 {
			lv.BytesPerToken = d.BytesRead / int64(total)
		}
		if li > 0 {
			lv.RatioToFirst = lv.TokensPerS / res.Levels[0].TokensPerS
		} else {
			lv.RatioToFirst = 1
		}
		res.Levels = append(res.Levels, lv)
		watch.Idle()
		if !*asJSON {
			fmt.Fprintf(stderr, "%d clients: %d tokens in %.2f s\n", c, total, wall.Seconds())
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "%s, budget %d bytes, load %.1f s, %d-token prompts, %d tokens per request\n", res.Model, res.BudgetBytes, res.LoadSeconds, *promptLen, *tokens)
	fmt.Fprintf(stdout, "%8s %9s %7s %9s %10s %12s %8s %8s %8s %10s\n", "clients", "requests", "tokens", "wall s", "tok/s", "tok/s/client", "ratio", "ttft s", "rows/pass", "GB/token")
	for _, lv := range res.Levels {
		fmt.Fprintf(stdout, "%8d %9d %7d %9.2f %10.3f %12.3f %7.2f× %8.2f %9.1f %10.3f\n", lv.Clients, lv.Requests, lv.GeneratedTokens, lv.WallSeconds,
			lv.TokensPerS, lv.ClientTokensPerS, lv.RatioToFirst, lv.MeanTTFTSeconds, lv.RowsPerPass, float64(lv.BytesPerToken)/1e9)
	}
	return nil
}

// streamCompletion streams one completion of prompt and returns the
// tokens it generated (the usage chunk's count) and the time to its first
// text chunk.
func streamCompletion(c *http.Client, url string, prompt []int, tokens int) (int, time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": true,
		"stream": true, "stream_options": map[string]bool{"include_usage": true}})
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var first time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return n, first, fmt.Errorf("bad event %q: %v", data, err)
		}
		if ev.Error != nil {
			return n, first, fmt.Errorf("the stream failed: %s", ev.Error.Message)
		}
		if first == 0 && len(ev.Choices) > 0 {
			first = time.Since(start)
		}
		if ev.Usage != nil {
			n = ev.Usage.CompletionTokens
		}
	}
	return n, first, sc.Err()
}
