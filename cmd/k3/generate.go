package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
)

// decodeMode is how a command feeds the sequence: full re-runs a fresh
// forward over all of it (an oracle for the incremental path).
type decodeMode struct{ full bool }

func parseMode(s string) (decodeMode, error) {
	switch s {
	case "incremental", "":
		return decodeMode{}, nil
	case "full":
		return decodeMode{full: true}, nil
	}
	return decodeMode{}, cli.Usagef("--mode %q: want full or incremental", s)
}

// generateFull decodes greedily by full recompute: every token is the
// argmax (lower id on ties) of a fresh session's forward over the whole
// sequence, so its ids check the engine's incremental decoding.
func generateFull(ctx context.Context, m *k3.Model, prompt []int, maxTokens int, emit func(int)) error {
	seq := slices.Clone(prompt)
	for range maxTokens {
		s := m.NewSession()
		lg, err := s.Step(ctx, seq)
		s.Close()
		if err != nil {
			return err
		}
		best := 0
		for j, v := range lg {
			if v > lg[best] {
				best = j
			}
		}
		seq = append(seq, best)
		emit(best)
	}
	return nil
}

func runGenerate(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("generate", "--model DIR (--ids 1,2,3 | --batch-file FILE) [flags]", stderr)
	var mf cli.ModelFlags
	mf.Register(fs)
	ids := fs.String("ids", "", "prompt token `ids`, comma separated")
	maxTokens := fs.Int("max-tokens", 16, "number of tokens to generate")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "keep the K most likely tokens (0 = all)")
	topP := fs.Float64("top-p", 0, "nucleus sampling threshold (0 = off)")
	minP := fs.Float64("min-p", 0, "drop tokens below this fraction of the best (0 = off)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	mode := fs.String("mode", "incremental", "decoding `mode`: incremental (carried state) or full (re-forward per token)")
	var specFlag cli.SpecFlag
	specFlag.Register(fs, 0)
	spec := &specFlag.N
	asJSON := fs.Bool("json", false, "print one JSON object (with a constraint, the generated text too); to constrain the output to JSON, see --json-object and --json-schema")
	stats := fs.Bool("stats", false, "print I/O, cache, time and memory statistics (a \"stats\" object with --json)")
	batchFile := fs.String("batch-file", "", "decode many prompts together in shared passes: one comma-separated prompt of ids per `file` line (blank lines and # comments skipped); without --max-context each session holds the longest prompt plus --max-tokens")
	sessions := fs.Int("sessions", 0, "with --batch-file: at most `N` prompts decoded at once, each holding a session's state (0 = all of them)")
	maxBatch := fs.Int("max-batch", 0, "most token `rows` one pass over the weights carries, summed over the sessions in it (0 = max(sessions, 64) with --batch-file, else the prefill chunk)")
	var cons cli.ConstraintFlags
	cons.Register(fs)
	cli.InputFiles(fs, "batch-file")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	sampling := k3.SamplingOptions{Temperature: float32(*temperature), TopK: *topK, TopP: float32(*topP), MinP: float32(*minP), Seed: *seed}
	if err := cli.FirstError(
		cli.NotNegative("max-tokens", *maxTokens, "none: the prompt only"),
		cli.NotNegative("sessions", *sessions, "all the prompts at once"),
		cli.NotNegative("max-batch", *maxBatch, "the default"),
		checkSampling(sampling),
	); err != nil {
		return err
	}
	if _, err := mf.Options(); err != nil {
		return err
	}
	if err := cons.Check(); err != nil {
		return err
	}
	for _, s := range cons.Ignored() {
		fmt.Fprintf(stderr, "k3 generate: --schema-lenient: not enforced: %s\n", s)
	}
	if *batchFile != "" && *ids != "" {
		return cli.Usagef("give --ids or --batch-file, not both")
	}
	var prompt []int
	var batch []batchPrompt
	var err error
	if *batchFile != "" {
		if batch, err = readBatchFile(*batchFile); err != nil {
			return err
		}
	} else if prompt, err = parseIDsFlag("ids", *ids); err != nil {
		return err
	}
	md, err := parseMode(*mode)
	if err != nil {
		return err
	}
	if *spec != 0 && md.full {
		return cli.Usagef("--spec needs --mode incremental")
	}
	if md.full && (*temperature != 0 || *batchFile != "" || cons.Set()) {
		return cli.Usagef("--mode full decodes one prompt greedily: no --temperature, no --batch-file, no constraint")
	}
	opts := k3.GenerateOptions{MaxTokens: *maxTokens, Speculate: *spec, Sampling: sampling}
	ctx, cancel := cli.SignalContext()
	defer cancel()
	if batch != nil {
		return generateBatch(ctx, &mf, *batchFile, batch, batchRun{opts: opts, cons: &cons, sessions: *sessions, maxBatch: *maxBatch,
			json: *asJSON, stats: *stats}, stdout, stderr)
	}
	m, err := mf.OpenWith(ctx, func(o *k3.Options) { o.MaxBatch, o.Speculate = *maxBatch, *spec })
	if err != nil {
		return err
	}
	defer m.Close()
	if opts.Constraint, err = cons.Constraint(m); err != nil {
		return err
	}
	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return err
	}
	defer watch.Close()
	out := watch.Text(stdout)
	var gen []int
	emit := func(id int) {
		gen = append(gen, id)
		watch.Token()
		if !*asJSON {
			fmt.Fprintf(out, "%d\n", id)
		}
	}
	if md.full {
		watch.Start()
		if err := generateFull(watch.Prefill(ctx, 0), m, prompt, *maxTokens, emit); err != nil {
			return err
		}
	} else if *maxTokens > 0 {
		watch.Start()
		for tok, err := range m.Generate(watch.Prefill(ctx, len(prompt)), prompt, opts) {
			if err != nil {
				return err
			}
			emit(tok.ID)
		}
	}
	watch.Close()
	if *asJSON {
		out := struct {
			PromptIDs     []int          `json:"prompt_ids"`
			GeneratedIDs  []int          `json:"generated_ids"`
			GeneratedText *string        `json:"generated_text,omitempty"`
			Stats         *cli.StatsJSON `json:"stats,omitempty"`
		}{PromptIDs: prompt, GeneratedIDs: append([]int{}, gen...), GeneratedText: constrainedText(m, opts, gen)}
		if *stats {
			out.Stats = cli.NewStatsJSON(m.Stats())
			out.Stats.ClusterJSON = cli.NewClusterJSON(m.Cluster(), len(gen))
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	if *stats {
		fmt.Fprintln(stderr, cli.FormatStats(m.Stats()))
		if c := cli.NewClusterJSON(m.Cluster(), len(gen)); c != nil {
			fmt.Fprintln(stderr, c)
		}
	}
	return nil
}

func runLogits(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("logits", "--model DIR --ids 1,2,3 [flags]", stderr)
	var mf cli.ModelFlags
	mf.Register(fs)
	ids := fs.String("ids", "", "token `ids`, comma separated")
	mode := fs.String("mode", "incremental", "`mode`: full (one teacher-forced forward) or incremental (one token per step, carried state)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	tokens, err := parseIDsFlag("ids", *ids)
	if err != nil {
		return err
	}
	md, err := parseMode(*mode)
	if err != nil {
		return err
	}
	if _, err := mf.Options(); err != nil {
		return err
	}
	ctx, cancel := cli.SignalContext()
	defer cancel()
	m, err := mf.Open(ctx)
	if err != nil {
		return err
	}
	defer m.Close()
	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return err
	}
	defer watch.Close()
	watch.Start()
	V := m.Config().Vocab
	s := m.NewSession()
	var all []float32
	if md.full {
		if all, err = s.Logits(watch.Prefill(ctx, len(tokens)), tokens); err != nil {
			return err
		}
	} else {
		// One token per step: each counts as a token of the watch.
		all = make([]float32, 0, len(tokens)*V)
		for _, t := range tokens {
			l, err := s.Step(ctx, []int{t})
			if err != nil {
				return err
			}
			watch.Token()
			all = append(all, l...)
		}
	}
	watch.Close()
	type position struct {
		Argmax     int       `json:"argmax"`
		LogitsHead []float32 `json:"logits_head"`
	}
	out := struct {
		Positions  []position `json:"positions"`
		LastLogits []float32  `json:"last_logits"`
	}{}
	for i := range tokens {
		row := all[i*V : (i+1)*V]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		out.Positions = append(out.Positions, position{Argmax: best, LogitsHead: row[:min(8, V)]})
	}
	out.LastLogits = all[(len(tokens)-1)*V:]
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	for i, p := range out.Positions {
		fmt.Fprintf(stdout, "%d\ttoken %d\targmax %d\t%v\n", i, tokens[i], p.Argmax, p.LogitsHead)
	}
	return nil
}

// batchPrompt is one prompt of a --batch-file and the line it came from.
type batchPrompt struct {
	line int
	ids  []int
}

// readBatchFile reads one comma-separated prompt of token ids per line,
// skipping blank lines and lines starting with #. A bad line is a usage
// error naming it.
func readBatchFile(path string) ([]batchPrompt, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--batch-file: %w", err)
	}
	var ps []batchPrompt
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ids, err := parseIDs(line)
		if err != nil {
			return nil, cli.Usagef("%s line %d: %v", path, i+1, err)
		}
		ps = append(ps, batchPrompt{line: i + 1, ids: ids})
	}
	if len(ps) == 0 {
		return nil, cli.Usagef("%s: no prompts", path)
	}
	return ps, nil
}

// constrainedText is the text of the generated ids under a constraint
// (what the constraint made valid), nil without one.
func constrainedText(m *k3.Model, opts k3.GenerateOptions, ids []int) *string {
	if opts.Constraint == nil {
		return nil
	}
	s := m.Tokenizer().DecodeLenient(ids)
	return &s
}

// batchRun is what generateBatch needs from the command line.
type batchRun struct {
	opts        k3.GenerateOptions
	cons        *cli.ConstraintFlags // bound to the model once it is open
	sessions    int                  // at most this many prompts at once; 0: all
	maxBatch    int                  // 0: max(sessions, 64)
	json, stats bool
}

// generateBatch decodes every prompt of a batch file at once, one
// goroutine and one Session each, so the Model can carry them in shared
// passes over the weights. Results come out in file order. The first
// failing prompt fails the command (its line is named) and cancels the
// others.
func generateBatch(ctx context.Context, mf *cli.ModelFlags, path string, ps []batchPrompt, br batchRun, stdout, stderr io.Writer) error {
	n := len(ps)
	if br.sessions > 0 {
		n = min(n, br.sessions)
	}
	rows := br.maxBatch
	if rows == 0 {
		rows = max(n, 64)
	}
	// Without --max-context, every session gets room for the longest
	// sequence of the batch, not 4096 positions each.
	longest := 0
	for _, p := range ps {
		longest = max(longest, len(p.ids)+br.opts.MaxTokens)
	}
	m, err := mf.OpenWith(ctx, func(o *k3.Options) {
		o.Sessions, o.MaxBatch, o.Speculate = n, rows, br.opts.Speculate
		if o.MaxContext == 0 {
			o.MaxContext = longest
		}
	})
	if err != nil {
		if errors.Is(err, k3.ErrBudget) {
			return fmt.Errorf("%w (decoding %d prompts at once holds %d sessions' state; lower --sessions or raise --budget)", err, n, n)
		}
		return err
	}
	defer m.Close()
	if br.cons != nil {
		// One constraint for all the prompts: each generation follows it
		// with a matcher of its own.
		if br.opts.Constraint, err = br.cons.Constraint(m); err != nil {
			return err
		}
	}
	V := m.Config().Vocab
	for _, p := range ps {
		for _, id := range p.ids {
			if id >= V {
				return fmt.Errorf("%s line %d: %w: token %d is outside [0, %d)", path, p.line, k3.ErrTokenOutOfRange, id, V)
			}
		}
	}

	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return err
	}
	defer watch.Close()
	watch.Start()
	gen := make([][]int, len(ps))
	if br.opts.MaxTokens > 0 {
		parent := ctx
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var (
			mu       sync.Mutex
			firstErr error
			wg       sync.WaitGroup
		)
		slots := make(chan struct{}, n)
		for i := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				defer func() { <-slots }()
				s := m.NewSession()
				defer s.Close()
				out := make([]int, 0, br.opts.MaxTokens)
				for tok, err := range s.Generate(watch.Prefill(ctx, len(ps[i].ids)), ps[i].ids, br.opts) {
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("%s line %d: %w", path, ps[i].line, err)
							cancel()
						}
						mu.Unlock()
						return
					}
					out = append(out, tok.ID)
					watch.Token()
				}
				gen[i] = out
			}()
		}
		wg.Wait()
		if err := parent.Err(); err != nil && (firstErr == nil || errors.Is(firstErr, err)) {
			return fmt.Errorf("interrupted: %w", err) // Ctrl-C, not a prompt, stopped the batch
		}
		if firstErr != nil {
			return firstErr
		}
	}
	watch.Close()

	if br.json {
		type result struct {
			PromptIDs     []int   `json:"prompt_ids"`
			GeneratedIDs  []int   `json:"generated_ids"`
			GeneratedText *string `json:"generated_text,omitempty"`
		}
		out := struct {
			Results []result        `json:"results"`
			Stats   *batchStatsJSON `json:"stats,omitempty"`
		}{Results: make([]result, len(ps))}
		for i, p := range ps {
			out.Results[i] = result{PromptIDs: p.ids, GeneratedIDs: append([]int{}, gen[i]...), GeneratedText: constrainedText(m, br.opts, gen[i])}
		}
		if br.stats {
			out.Stats = toBatchStatsJSON(m.Stats())
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	for _, g := range gen {
		fmt.Fprintln(stdout, joinInts(g))
	}
	if br.stats {
		st := m.Stats()
		fmt.Fprintln(stderr, cli.FormatStats(st))
		b := toBatchStatsJSON(st)
		fmt.Fprintf(stderr, "passes %d carrying %d rows (%.2f rows per pass), %.1f distinct experts per MoE layer per pass\n",
			b.Passes, b.Rows, b.RowsPerPass, b.ExpertUnionPerLayer)
	}
	return nil
}

// batchStatsJSON is the "stats" object of --batch-file --json: the usual
// one plus how the prompts shared passes (zero where the library does not
// count passes).
type batchStatsJSON struct {
	*cli.StatsJSON
	Passes              int64   `json:"passes"`
	Rows                int64   `json:"rows"`
	RowsPerPass         float64 `json:"rows_per_pass"`
	ExpertUnionPerLayer float64 `json:"expert_union_per_layer"`
}

func toBatchStatsJSON(s k3.Stats) *batchStatsJSON {
	return &batchStatsJSON{StatsJSON: cli.NewStatsJSON(s), Passes: s.Passes, Rows: s.Rows,
		RowsPerPass: ratio(s.Rows, s.Passes), ExpertUnionPerLayer: ratio(s.ExpertUnion, s.MoELayerPasses)}
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// joinInts writes ids comma separated, the format of --ids and batch files.
func joinInts(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(id))
	}
	return b.String()
}
