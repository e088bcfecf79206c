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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/server"
)

// agentTrace is a replayed agent session: a header (system prompt and
// tool schemas) every request resends, then the conversation so far, then
// the turn's new message. The replies in the trace stand for what the
// agent got back: a real agent's log, replayed, sends them as they were
// rendered, whatever the model generates now.
type agentTrace struct {
	header         []int
	tails          [][]int // the header's last tokens, new every turn (a date, a status line)
	users, replies [][]int
}

func newAgentTrace(seed uint64, vocab, header, tail, turns, user, reply int) *agentTrace {
	rng := rand.New(rand.NewPCG(seed, 0x61676e74))
	ids := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = rng.IntN(vocab)
		}
		return out
	}
	tr := &agentTrace{header: ids(header - tail)}
	for range turns {
		tr.tails = append(tr.tails, ids(tail))
		tr.users = append(tr.users, ids(user))
		tr.replies = append(tr.replies, ids(reply))
	}
	return tr
}

// prompt returns turn k's prompt (0-based).
func (tr *agentTrace) prompt(k int) []int {
	p := append(append([]int(nil), tr.header...), tr.tails[k]...)
	for j := range k {
		p = append(append(p, tr.users[j]...), tr.replies[j]...)
	}
	return append(p, tr.users[k]...)
}

// agentTurn is one turn of the agent benchmark, measured with the prefix
// cache and without it.
type agentTurn struct {
	Turn         int     `json:"turn"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	CachedShare  float64 `json:"cached_share"`
	TTFT         float64 `json:"ttft_seconds"`
	// The uncached fields are zero for a turn --uncached-turns left out.
	TTFTUncached  float64 `json:"ttft_uncached_seconds,omitempty"`
	TTFTRatio     float64 `json:"ttft_ratio,omitempty"`
	BytesRead     int64   `json:"bytes_read"`
	BytesUncached int64   `json:"bytes_read_uncached,omitempty"`
}

type agentResult struct {
	Model       string      `json:"model"`
	BudgetBytes int64       `json:"budget_bytes"`
	Header      int         `json:"header_tokens"`
	HeaderTail  int         `json:"header_tail_tokens"`
	UserTokens  int         `json:"user_tokens"`
	ReplyTokens int         `json:"reply_tokens"`
	Turns       []agentTurn `json:"turns"`
	// The means over turns 2 and later, the targets: TTFT against
	// the uncached turn, and the share of each prompt restored.
	MeanTTFTRatioLater  float64 `json:"mean_ttft_ratio_turns_2_on"`
	MaxTTFTRatioLater   float64 `json:"max_ttft_ratio_turns_2_on"`
	MinCachedShareLater float64 `json:"min_cached_share_turns_2_on"`
	PrefixDir           string  `json:"prefix_cache_dir"`
	// The process's peak RSS while each model ran (VmHWM, reset before
	// each), so the cached run's can be held against the budget.
	PeakRSSCached   int64 `json:"peak_rss_cached_bytes"`
	PeakRSSUncached int64 `json:"peak_rss_uncached_bytes"`
}

// agentFlags are bench-serve --agent's own flags.
type agentFlags struct {
	turns, header, tail, user, reply, tokens int
	seed                                     uint64
	json                                     bool
	tokenizer                                string // --tokenizer
	// uncached lists the turns (0-based) also measured without the cache;
	// nil means every turn.
	uncached map[int]bool
}

// parseTurns parses --uncached-turns: 1-based turn numbers up to turns.
func parseTurns(s string, turns int) (map[int]bool, error) {
	if s == "" {
		return nil, nil
	}
	out := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > turns {
			return nil, cli.Usagef("--uncached-turns: %q is not a turn between 1 and %d", f, turns)
		}
		out[n-1] = true
	}
	return out, nil
}

// runAgent replays an agent-like trace twice, each turn one streamed
// completion: with the prefix cache (in a fresh directory, unless
// --prefix-cache-dir names one) and without it, on the same budget, one
// model after the other. It reports every turn's time to first token,
// prompt and cached tokens, and bytes read.
func runAgent(mf *cli.ModelFlags, af agentFlags, stdout, stderr io.Writer) error {
	need := af.header + af.turns*(af.user+af.reply) + af.tokens + 8
	if mf.MaxContext == 0 {
		mf.MaxContext = max(need, 4096)
	}
	if mf.MaxContext < need {
		return cli.Usagef("--max-context %d is shorter than the trace's last prompt (%d tokens)", mf.MaxContext, need)
	}
	dir := mf.Prefix.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "k3-agent-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := agentResult{Model: filepath.Base(filepath.Clean(mf.Dir)), Header: af.header, HeaderTail: af.tail, UserTokens: af.user, ReplyTokens: af.reply, PrefixDir: dir}
	for _, cached := range []bool{true, false} {
		opts, err := mf.Options()
		if err != nil {
			return err
		}
		opts.PrefixCache = nil
		if af.tokenizer != "" {
			opts.TokenizerDir = af.tokenizer
		}
		if cached {
			o, err := mf.Prefix.Settings()
			if err != nil {
				return err
			}
			o.Dir = dir
			opts.PrefixCache = o
		}
		// The first model's memory goes back to the OS before the second
		// opens, and each run's peak RSS is its own.
		resetPeakRSS()
		m, err := k3.OpenContext(context.Background(), mf.Dir, opts)
		if err != nil {
			return err
		}
		res.BudgetBytes = m.Stats().BudgetBytes
		tr := newAgentTrace(af.seed, m.Config().Vocab, af.header, af.tail, af.turns, af.user, af.reply)
		watch, werr := mf.Progress.Watch(m, stderr)
		if werr != nil {
			m.Close()
			return werr
		}
		label := "agent turns, prefix cache off"
		if cached {
			label = "agent turns, prefix cache on"
		}
		watch.Passes(label)
		err = replayAgent(m, mf.MaxContext, tr, af, cached, &res, watch.Text(stderr))
		watch.Close()
		if peak := m.Stats().PeakRSSBytes; cached {
			res.PeakRSSCached = peak
		} else {
			res.PeakRSSUncached = peak
		}
		m.Close()
		if err != nil {
			return err
		}
	}
	n, measured := 0, 0
	for _, t := range res.Turns[1:] {
		if t.TTFTUncached > 0 {
			res.MeanTTFTRatioLater += t.TTFTRatio
			res.MaxTTFTRatioLater = max(res.MaxTTFTRatioLater, t.TTFTRatio)
			measured++
		}
		if n == 0 || t.CachedShare < res.MinCachedShareLater {
			res.MinCachedShareLater = t.CachedShare
		}
		n++
	}
	if measured > 0 {
		res.MeanTTFTRatioLater /= float64(measured)
	}
	if af.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "agent trace on %s (budget %s): a %d-token header (its last %d new every turn), then %d turns of a %d-token message and a %d-token reply\n",
		res.Model, human(res.BudgetBytes), af.header, af.tail, af.turns, af.user, af.reply)
	fmt.Fprintf(stdout, "%5s %8s %8s %7s %10s %10s %7s %10s %10s\n", "turn", "prompt", "cached", "share", "TTFT s", "uncached", "ratio", "GB read", "uncached")
	for _, t := range res.Turns {
		if t.TTFTUncached == 0 {
			fmt.Fprintf(stdout, "%5d %8d %8d %6.1f%% %10.2f %10s %7s %10.2f %10s\n", t.Turn, t.PromptTokens, t.CachedTokens, 100*t.CachedShare,
				t.TTFT, "-", "-", float64(t.BytesRead)/1e9, "-")
			continue
		}
		fmt.Fprintf(stdout, "%5d %8d %8d %6.1f%% %10.2f %10.2f %7.3f %10.2f %10.2f\n", t.Turn, t.PromptTokens, t.CachedTokens, 100*t.CachedShare,
			t.TTFT, t.TTFTUncached, t.TTFTRatio, float64(t.BytesRead)/1e9, float64(t.BytesUncached)/1e9)
	}
	fmt.Fprintf(stdout, "peak RSS: %s with the prefix cache, %s without (budget %s)\n", human(res.PeakRSSCached), human(res.PeakRSSUncached), human(res.BudgetBytes))
	fmt.Fprintf(stdout, "turns 2-%d: TTFT %.3fx of uncached on average over the turns measured both ways (at most %.3fx); at least %.1f%% of each prompt restored\n",
		af.turns, res.MeanTTFTRatioLater, res.MaxTTFTRatioLater, 100*res.MinCachedShareLater)
	return nil
}

// replayAgent sends every turn of tr to m's server as a streamed
// completion and records it in res (cached: the run with the prefix
// cache, whose turns it appends; otherwise it fills the uncached fields).
func replayAgent(m *k3.Model, maxContext int, tr *agentTrace, af agentFlags, cached bool, res *agentResult, stderr io.Writer) error {
	srv, err := server.New(m, server.Options{Name: "bench", MaxContext: maxContext, Sessions: 1, Queue: 1, RequestTimeout: 24 * time.Hour})
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
	for k := range af.turns {
		if !cached && af.uncached != nil && !af.uncached[k] {
			continue
		}
		prompt := tr.prompt(k)
		before := m.Stats()
		ttft, err := firstToken(url, prompt, af.tokens)
		if err != nil {
			return fmt.Errorf("turn %d: %w", k+1, err)
		}
		d := m.Stats().Sub(before)
		mode := "uncached"
		if cached {
			mode = "cached"
			res.Turns = append(res.Turns, agentTurn{Turn: k + 1, PromptTokens: len(prompt), CachedTokens: d.PrefixTokens,
				CachedShare: float64(d.PrefixTokens) / float64(len(prompt)), TTFT: ttft, BytesRead: d.BytesRead})
		} else {
			t := &res.Turns[k]
			t.TTFTUncached, t.BytesUncached = ttft, d.BytesRead
			t.TTFTRatio = t.TTFT / ttft
		}
		fmt.Fprintf(stderr, "bench: agent turn %d (%s): %d prompt tokens, %d restored, first token after %.2f s, %.2f GB read\n",
			k+1, mode, len(prompt), d.PrefixTokens, ttft, float64(d.BytesRead)/1e9)
	}
	return nil
}

// firstToken streams a completion of tokens tokens for prompt and returns
// the time to its first token; it reads the stream to its end.
func firstToken(url string, prompt []int, tokens int) (float64, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": true, "ignore_eos": true})
	start := time.Now()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	ttft := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ttft == 0 && strings.HasPrefix(line, "data: {") {
			ttft = time.Since(start).Seconds()
		}
	}
	if ttft == 0 {
		return 0, fmt.Errorf("no token in the stream")
	}
	return ttft, sc.Err()
}
