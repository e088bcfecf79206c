package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// benchBatchRun is what k3 bench --batch needs from the command line.
type benchBatchRun struct {
	sizes             []int
	tokens, promptLen int
	seed              uint64
	check             bool
	maxBatch          int
	cold, json        bool
}

// batchResult is one batch size of k3 bench --batch, measured over the
// decode phase only: from the moment every sequence has its first token
// (out of its prefill) to the moment the last one has all of its tokens.
// Per-token figures divide by the tokens generated in that phase, summed
// over the sequences.
type batchResult struct {
	Batch               int     `json:"batch"`
	PrefillSeconds      float64 `json:"prefill_seconds"`
	DecodeSeconds       float64 `json:"decode_seconds"`
	GeneratedTokens     int     `json:"generated_tokens"`
	DecodeTokensPerS    float64 `json:"decode_tokens_per_s"` // aggregate over the sequences
	DecodeSPerToken     float64 `json:"decode_s_per_token"`  // per sequence
	BytesReadPerToken   int64   `json:"bytes_read_per_token"`
	TrunkBytesPerToken  int64   `json:"trunk_bytes_per_token"`
	ExpertBytesPerToken int64   `json:"expert_bytes_per_token"`
	ExpertUnionPerLayer float64 `json:"expert_union_per_layer"`
	Passes              int64   `json:"passes"`
	RowsPerPass         float64 `json:"rows_per_pass"`
	CacheHitRate        float64 `json:"cache_hit_rate"`
	PeakRSSBytes        int64   `json:"peak_rss_bytes"`
	// Checked says every sequence generated the tokens it generates alone
	// (--check).
	Checked bool `json:"checked,omitempty"`
}

// benchBatchResult is what k3 bench --batch --json prints.
type benchBatchResult struct {
	Model        string        `json:"model"`
	BudgetBytes  int64         `json:"budget_bytes"`
	Threads      int           `json:"threads"`
	Kernels      string        `json:"kernels"`
	Cold         string        `json:"cold,omitempty"`
	LoadSeconds  float64       `json:"load_seconds"`
	PromptLen    int           `json:"prompt_len"`
	DecodeTokens int           `json:"decode_tokens"` // per sequence
	Sessions     int           `json:"sessions"`
	MaxBatch     int           `json:"max_batch"`
	Batches      []batchResult `json:"batches"`
}

// benchPrompt is the prompt of sequence i: random ids from the seed and i.
// Sequence 0 has the prompt of the single-run bench.
func benchPrompt(seed uint64, i, n, vocab int) []int {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	p := make([]int, n)
	for j := range p {
		p[j] = rng.IntN(vocab)
	}
	return p
}

// benchBatches opens the model once, with room for the largest batch, and
// measures every batch size in turn.
func benchBatches(mf *cli.ModelFlags, br benchBatchRun, stdout, stderr io.Writer) error {
	ctx, cancel := cli.SignalContext()
	defer cancel()
	budget, err := mf.Budget.Bytes()
	if err != nil {
		return err
	}
	maxB := slices.Max(br.sizes)
	rows := br.maxBatch
	if rows == 0 {
		rows = maxB + 64
	}
	r := &benchBatchResult{Model: mf.Dir, BudgetBytes: budget, PromptLen: br.promptLen, DecodeTokens: br.tokens,
		Kernels: tensor.Implementation() + "/" + quant.Implementation(), Sessions: maxB, MaxBatch: rows, Threads: mf.Threads}
	if r.Threads == 0 {
		r.Threads = defaultThreads()
	}
	if br.cold {
		shards, err := filepath.Glob(filepath.Join(mf.Dir, "*.safetensors"))
		if err != nil || len(shards) == 0 {
			return fmt.Errorf("%s: %w: no *.safetensors files", mf.Dir, k3.ErrBadCheckpoint)
		}
		if mf.Trunk != "" {
			shards = append(shards, filepath.Join(mf.Trunk, "trunk.bin"))
		}
		r.Cold = dropCaches(shards)
	}
	start := time.Now()
	m, err := mf.OpenWith(ctx, func(o *k3.Options) {
		o.MaxContext = max(mf.MaxContext, br.promptLen+br.tokens+1)
		o.Sessions, o.MaxBatch = maxB, rows
	})
	if err != nil {
		if errors.Is(err, k3.ErrBudget) {
			return fmt.Errorf("%w (batch %d holds %d sessions' state; raise --budget or lower --batch)", err, maxB, maxB)
		}
		return err
	}
	defer m.Close()
	r.LoadSeconds = time.Since(start).Seconds()
	V := m.Config().Vocab
	prompts := make([][]int, maxB)
	for i := range prompts {
		prompts[i] = benchPrompt(br.seed, i, br.promptLen, V)
	}
	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return err
	}
	defer watch.Close()
	solo := make([][]int, maxB) // what each sequence generates alone (--check)
	for _, b := range br.sizes {
		fmt.Fprintf(watch.Text(stderr), "bench: batch %d: %d sequences of %d prompt tokens, %d decoded each...\n", b, b, br.promptLen, br.tokens)
		res, gen, err := benchBatch(ctx, m, prompts[:b], br.tokens, watch)
		if err != nil {
			return fmt.Errorf("batch %d: %w", b, err)
		}
		if b == 1 && solo[0] == nil {
			solo[0] = gen[0]
		}
		if br.check {
			for i := range b {
				if solo[i] == nil {
					_, g, err := benchBatch(ctx, m, prompts[i:i+1], br.tokens, watch)
					if err != nil {
						return fmt.Errorf("check: sequence %d alone: %w", i, err)
					}
					solo[i] = g[0]
				}
				if !slices.Equal(gen[i], solo[i]) {
					return fmt.Errorf("check: batch %d, sequence %d generated %v; alone it generates %v", b, i, gen[i], solo[i])
				}
			}
			res.Checked = true
		}
		r.Batches = append(r.Batches, res)
	}
	watch.Close()
	if br.json {
		return json.NewEncoder(stdout).Encode(r)
	}
	printBenchBatches(stdout, r)
	return nil
}

// benchBatch runs one sequence per prompt at once, each in its own
// goroutine and Session, greedy, tokens+1 tokens each (the first comes out
// of the prefill). A barrier holds every sequence after its first token
// until all have it, so the decode phase is measured alone. It returns the
// measurement and every sequence's tokens. watch (nil: none) shows the
// prefill and the decoding.
func benchBatch(ctx context.Context, m *k3.Model, prompts [][]int, tokens int, watch *cli.Watch) (batchResult, [][]int, error) {
	B := len(prompts)
	res := batchResult{Batch: B}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	arrived := make(chan struct{}, B) // one send per sequence: prefilled, or failed before
	release := make(chan struct{})
	gen := make([][]int, B)
	watch.Start()
	defer watch.Idle()
	start := time.Now()
	for i := range B {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := m.NewSession()
			defer s.Close()
			sent := false
			defer func() {
				if !sent {
					arrived <- struct{}{}
				}
			}()
			for tok, err := range s.Generate(watch.Prefill(ctx, len(prompts[i])), prompts[i], k3.GenerateOptions{MaxTokens: tokens + 1}) {
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("sequence %d: %w", i, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				gen[i] = append(gen[i], tok.ID)
				watch.Token()
				if !sent {
					sent = true
					arrived <- struct{}{}
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	for range B {
		<-arrived
	}
	res.PrefillSeconds = time.Since(start).Seconds()
	st1 := m.Stats()
	t0 := time.Now()
	close(release)
	wg.Wait()
	decode := time.Since(t0).Seconds()
	st2 := m.Stats()
	if firstErr != nil {
		return res, nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, nil, err
	}
	d := st2.Sub(st1)
	for _, g := range gen {
		res.GeneratedTokens += len(g) - 1
	}
	G := float64(res.GeneratedTokens)
	res.DecodeSeconds = decode
	if decode > 0 {
		res.DecodeTokensPerS = G / decode
	}
	res.DecodeSPerToken = decode / float64(tokens)
	res.BytesReadPerToken = int64(float64(d.BytesRead) / G)
	res.TrunkBytesPerToken = int64(float64(d.TrunkBytesRead) / G)
	res.ExpertBytesPerToken = int64(float64(d.ExpertBytesRead) / G)
	res.ExpertUnionPerLayer = ratio(d.ExpertUnion, d.MoELayerPasses)
	res.Passes = d.Passes
	res.RowsPerPass = ratio(d.Rows, d.Passes)
	if req := d.CacheHits + d.CacheMisses; req > 0 {
		res.CacheHitRate = float64(d.CacheHits) / float64(req)
	}
	res.PeakRSSBytes = st2.PeakRSSBytes
	return res, gen, nil
}

func printBenchBatches(w io.Writer, r *benchBatchResult) {
	budget := "unlimited"
	if r.BudgetBytes > 0 {
		budget = human(r.BudgetBytes)
	}
	fmt.Fprintf(w, "model %s, budget %s, %d threads, kernels %s, up to %d sessions and %d rows per pass\n",
		r.Model, budget, r.Threads, r.Kernels, r.Sessions, r.MaxBatch)
	if r.Cold != "" {
		fmt.Fprintf(w, "cold start: %s\n", r.Cold)
	}
	fmt.Fprintf(w, "load %.2f s; prompts of %d tokens, %d tokens decoded per sequence; decode phase only\n", r.LoadSeconds, r.PromptLen, r.DecodeTokens)
	fmt.Fprintf(w, "%6s %12s %8s %12s %11s %11s %10s %8s %10s %10s\n",
		"batch", "tokens/s", "vs first", "s/token/seq", "read/token", "trunk/token", "experts/l", "passes", "rows/pass", "peak RSS")
	for _, b := range r.Batches {
		vs := 0.0
		if f := r.Batches[0].DecodeTokensPerS; f > 0 {
			vs = b.DecodeTokensPerS / f
		}
		fmt.Fprintf(w, "%6d %12.2f %7.2f× %12.4f %11s %11s %10.1f %8d %10.2f %10s\n",
			b.Batch, b.DecodeTokensPerS, vs, b.DecodeSPerToken, human(b.BytesReadPerToken), human(b.TrunkBytesPerToken),
			b.ExpertUnionPerLayer, b.Passes, b.RowsPerPass, human(b.PeakRSSBytes))
	}
	if len(r.Batches) > 0 && r.Batches[len(r.Batches)-1].Checked {
		fmt.Fprintln(w, "check: every sequence generated the same tokens as alone")
	}
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
