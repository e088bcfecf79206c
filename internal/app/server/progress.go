package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/k3go/k3"
)

// DefaultProgressEvery is how often a long generation's progress is
// logged when Options.ProgressEvery is zero.
const DefaultProgressEvery = 10 * time.Second

// inflight follows the generations running now, so that a long one can be
// seen to move: at a small budget one pass over the weights takes tens of
// seconds, a long prompt several, and a reply hours. Every ProgressEvery
// it logs a line for each generation that has run that long (its prompt
// tokens prefilled of total, the tokens generated, the rate, the time
// left), and /metrics reports them all (collect).
type inflight struct {
	log   *slog.Logger
	every time.Duration // 0: no log lines
	now   func() time.Time

	mu      sync.Mutex
	reqs    map[*genProgress]struct{}
	ticking bool // the logging goroutine runs
}

// genProgress is one generation's progress.
type genProgress struct {
	path, remote string
	start        time.Time
	maxTokens    int // of every choice together

	// Under inflight.mu.
	prompt, fed  int
	generated    int
	firstToken   time.Time
	lastReported time.Time
}

func newInflight(log *slog.Logger, every time.Duration) *inflight {
	if every == 0 {
		every = DefaultProgressEvery
	}
	return &inflight{log: log, every: max(every, 0), now: time.Now, reqs: map[*genProgress]struct{}{}}
}

// begin records a generation of up to maxTokens tokens (all its choices)
// for the request in ctx, and returns it with ctx carrying the progress
// function that counts its prompt's tokens as the passes feed them. The
// first step made with the context is the prompt's.
func (f *inflight) begin(ctx context.Context, maxTokens int) (*genProgress, context.Context) {
	g := &genProgress{start: f.now(), maxTokens: maxTokens}
	if info, ok := ctx.Value(genInfoKey{}).(*genInfo); ok {
		g.path, g.remote = info.path, info.remote
	}
	f.mu.Lock()
	f.reqs[g] = struct{}{}
	if !f.ticking && f.every > 0 {
		f.ticking = true
		go f.tick()
	}
	f.mu.Unlock()
	steps := 0
	ctx = k3.WithProgress(ctx, func(p k3.Progress) {
		if p.Done == 0 {
			steps++
		}
		if steps != 1 {
			return
		}
		f.mu.Lock()
		if p.Done == 0 {
			g.prompt = p.Total
		}
		g.fed = p.Done
		f.mu.Unlock()
	})
	return g, ctx
}

// token counts a generated token of g.
func (f *inflight) token(g *genProgress) {
	f.mu.Lock()
	if g.generated == 0 {
		g.firstToken = f.now()
		g.fed = g.prompt
	}
	g.generated++
	f.mu.Unlock()
}

// end forgets g.
func (f *inflight) end(g *genProgress) {
	f.mu.Lock()
	delete(f.reqs, g)
	f.mu.Unlock()
}

// tick logs the long generations every f.every, and returns once none
// runs (begin starts it again).
func (f *inflight) tick() {
	t := time.NewTicker(f.every / 5)
	defer t.Stop()
	for range t.C {
		if !f.logDue() {
			return
		}
	}
}

// logDue logs a line for every generation that has run f.every and was
// not logged in the last f.every; false once none runs (and tick must
// stop).
func (f *inflight) logDue() bool {
	f.mu.Lock()
	if len(f.reqs) == 0 {
		f.ticking = false
		f.mu.Unlock()
		return false
	}
	now := f.now()
	var due [][]slog.Attr
	for g := range f.reqs {
		if now.Sub(g.start) < f.every || now.Sub(g.lastReported) < f.every {
			continue
		}
		g.lastReported = now
		due = append(due, g.attrs(now))
	}
	f.mu.Unlock()
	for _, a := range due {
		f.log.LogAttrs(context.Background(), slog.LevelInfo, "generation in progress", a...)
	}
	return true
}

// attrs are g's progress line at now (inflight.mu held): prefill_tokens
// is what the prompt computes (less a prefix the cache restored).
func (g *genProgress) attrs(now time.Time) []slog.Attr {
	phase := "prefill"
	if g.generated > 0 {
		phase = "decode"
	}
	a := []slog.Attr{slog.String("path", g.path), slog.String("remote", g.remote), slog.Duration("elapsed", now.Sub(g.start).Round(time.Millisecond)),
		slog.String("phase", phase), slog.Int("prefill_tokens", g.prompt), slog.Int("prefilled", g.fed), slog.Int("generated", g.generated),
		slog.Int("max_tokens", g.maxTokens)}
	if rate, ok := g.rate(now); ok {
		a = append(a, slog.Float64("tokens_per_s", rate))
	}
	if left, ok := g.left(now); ok {
		a = append(a, slog.Duration("left_at_most", left.Round(time.Second)))
	}
	return a
}

// rate is the generated tokens per second since the first.
func (g *genProgress) rate(now time.Time) (float64, bool) {
	if g.generated < 2 {
		return 0, false
	}
	el := now.Sub(g.firstToken).Seconds()
	return float64(g.generated-1) / max(el, 1e-9), true
}

// left estimates the time g still takes at most (it may stop before
// max_tokens): the rest of the prompt at the prefill's rate so far, or
// the tokens left at the decoding rate.
func (g *genProgress) left(now time.Time) (time.Duration, bool) {
	if g.generated == 0 {
		if g.fed == 0 || g.prompt == 0 {
			return 0, false
		}
		el := now.Sub(g.start)
		return time.Duration(float64(el) * float64(g.prompt-g.fed) / float64(g.fed)), true
	}
	rate, ok := g.rate(now)
	if !ok || rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(g.maxTokens-g.generated) / rate * float64(time.Second)), true
}

var (
	descInflightPrompt = prometheus.NewDesc("k3_inflight_prefill_tokens",
		"Prompt tokens the generations running now compute (less what the prefix cache restored): in all (state=\"total\") and fed so far (state=\"prefilled\").", []string{"state"}, nil)
	descInflightGenerated = prometheus.NewDesc("k3_inflight_generated_tokens", "Tokens the generations running now have generated so far.", nil, nil)
	descInflightOldest    = prometheus.NewDesc("k3_inflight_oldest_seconds", "How long the oldest generation running now has run (0: none).", nil, nil)
	descInflightLeft      = prometheus.NewDesc("k3_inflight_seconds_left",
		"The longest time a generation running now may still take: the rest of its prompt at its prefill rate, or its tokens left up to max_tokens at its decoding rate (0: none, or not known yet).", nil, nil)
)

// Describe and Collect make inflight a Prometheus collector of the
// generations running now.
func (f *inflight) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInflightPrompt
	ch <- descInflightGenerated
	ch <- descInflightOldest
	ch <- descInflightLeft
}

func (f *inflight) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	now := f.now()
	var prompt, fed, gen int
	var oldest, left time.Duration
	for g := range f.reqs {
		prompt += g.prompt
		fed += g.fed
		gen += g.generated
		oldest = max(oldest, now.Sub(g.start))
		if l, ok := g.left(now); ok {
			left = max(left, l)
		}
	}
	f.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descInflightPrompt, prometheus.GaugeValue, float64(prompt), "total")
	ch <- prometheus.MustNewConstMetric(descInflightPrompt, prometheus.GaugeValue, float64(fed), "prefilled")
	ch <- prometheus.MustNewConstMetric(descInflightGenerated, prometheus.GaugeValue, float64(gen))
	ch <- prometheus.MustNewConstMetric(descInflightOldest, prometheus.GaugeValue, oldest.Seconds())
	ch <- prometheus.MustNewConstMetric(descInflightLeft, prometheus.GaugeValue, left.Seconds())
}
