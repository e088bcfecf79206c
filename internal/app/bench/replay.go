package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/tokenizer"
)

// replayRun is k3 bench --replay's configuration.
type replayRun struct {
	path      string
	tokenizer string
	spec      int // a fixed draft length, or k3.SpeculateAuto
	subset    string
	files     int // first transcripts (0: all)
	turns     int // first assistant turns of each (0: all)
	skipTurns int // assistant turns skipped before them
	maxTokens int // tokens of each turn (0: all)
	maxPrompt int // turns whose prompt is longer are left out (0: none)
	// The projection: another checkpoint, budgets, batches, disk rates.
	project string
	budgets []int64
	batches []int
	gbps    []float64
	json    bool
}

// projRow is one projected cell: plain and speculative decoding of the
// replayed transcripts on the projected checkpoint.
type projRow struct {
	Budget int64   `json:"budget_bytes"`
	Batch  int     `json:"batch"`
	GBps   float64 `json:"gbps"`
	Fits   bool    `json:"fits"`
	// Resident: every weight fits the budget; a pass reads nothing, so a
	// projection of reads has nothing to say.
	Resident bool        `json:"resident,omitempty"`
	Plain    replayStats `json:"plain"`
	Spec     replayStats `json:"spec"`
	Speedup  float64     `json:"speedup"`
}

// replayReport is --replay's output: {"replay": {...}, "projection": [...]}.
type replayReport struct {
	Transcripts int                `json:"transcripts"`
	Turns       int                `json:"turns"`
	Tokens      int                `json:"turn_tokens"`
	Spec        string             `json:"spec_mode"`
	Subset      string             `json:"subset"`
	Replay      *replayModelResult `json:"replay,omitempty"`
	Projection  []projRow          `json:"projection"`
	Note        string             `json:"projection_model"`
}

// replayModelResult is the replay on a model.
type replayModelResult struct {
	Model   string      `json:"model"`
	Budget  int64       `json:"budget_bytes"`
	Plain   replayStats `json:"plain"`
	Spec    replayStats `json:"spec"`
	Speedup float64     `json:"speedup"`
	// Distinct ids of the transcripts, and how many were folded into the
	// model's smaller vocabulary (0: the text's structure is intact).
	Distinct int `json:"distinct_ids"`
	Folded   int `json:"folded_ids"`
	// Exact: both runs produced every turn's tokens.
	Exact bool `json:"exact"`
}

// selectTranscripts applies the subset and the limits.
func (rr *replayRun) selectTranscripts(trs []transcript) []transcript {
	var out []transcript
	for i, tr := range trs {
		switch rr.subset {
		case "even":
			if i%2 != 0 {
				continue
			}
		case "odd":
			if i%2 != 1 {
				continue
			}
		}
		if rr.files > 0 && len(out) == rr.files {
			break
		}
		turns := tr.turns[min(rr.skipTurns, len(tr.turns)):]
		if rr.turns > 0 && len(turns) > rr.turns {
			turns = turns[:rr.turns]
		}
		tr.turns = nil
		for _, t := range turns {
			if rr.maxPrompt > 0 && t[0] > rr.maxPrompt {
				continue
			}
			if rr.maxTokens > 0 && t[1]-t[0] > rr.maxTokens {
				t[1] = t[0] + rr.maxTokens
			}
			tr.turns = append(tr.turns, t)
		}
		if len(tr.turns) > 0 {
			out = append(out, tr)
		}
	}
	return out
}

// parseSpecMode reads --spec for --replay: auto or a draft length.
func parseSpecMode(s string) (int, error) {
	if s == "" || s == "auto" {
		return k3.SpeculateAuto, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != s {
		return 0, cli.Usagef("--spec with --replay: auto or a positive draft length, not %q", s)
	}
	return n, nil
}

// benchReplay is k3 bench --replay.
func benchReplay(mf *cli.ModelFlags, rr replayRun, stdout, stderr io.Writer) error {
	tokDir := rr.tokenizer
	if tokDir == "" {
		tokDir = mf.Dir
	}
	if tokDir == "" {
		return cli.Usagef("--replay needs --tokenizer DIR (or a --model with a tokenizer) to tokenize the transcripts")
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return fmt.Errorf("tokenizer for the transcripts: %w (give --tokenizer DIR, e.g. the release's tokenizer)", err)
	}
	all, err := loadTranscripts(rr.path, tok)
	if err != nil {
		return err
	}
	trs := rr.selectTranscripts(all)
	if len(trs) == 0 {
		return cli.Usagef("--replay: no turns left after --subset, --files and --turns")
	}
	rep := replayReport{Transcripts: len(trs), Subset: rr.subset, Spec: specName(rr.spec)}
	if rep.Subset == "" {
		rep.Subset = "all"
	}
	for _, tr := range trs {
		rep.Turns += len(tr.turns)
		for _, t := range tr.turns {
			rep.Tokens += t[1] - t[0]
		}
	}
	fmt.Fprintf(stderr, "bench: %d transcripts, %d assistant turns, %d tokens to produce\n", rep.Transcripts, rep.Turns, rep.Tokens)
	if mf.Dir != "" {
		if err := replayModel(mf, &rep, trs, rr, stderr); err != nil {
			return err
		}
	}
	if rr.project != "" {
		rows, err := project(trs, rr)
		if err != nil {
			return err
		}
		rep.Projection = rows
		rep.Note = "the replayed transcripts decoded by the engine's drafter and policy (internal/engine/specpolicy) without a model, " +
			"each pass costed by the planner's plan for the projected checkpoint: trunk bytes per pass plus the expected expert union's misses, at the disk rate; " +
			"compute not modelled but for each speculating sequence's state copy and rollback, " + fmt.Sprintf("%.3g s per GB of recurrent state", specSecondsPerByte*1e9)
	}
	if rr.json {
		return json.NewEncoder(stdout).Encode(rep)
	}
	printReplay(stdout, &rep)
	return nil
}

func specName(spec int) string {
	if spec == k3.SpeculateAuto {
		return "auto"
	}
	return fmt.Sprint(spec)
}

// specSecondsPerByte is what a speculating sequence costs a pass beyond
// its rows, per byte of its recurrent state: the copy before the pass,
// and after a rejection the copy back and the replay of the kept rows.
// Measured at the released widths on the development machine
// (BenchmarkSpeculationState, docs/PERFORMANCE.md §8): 84 ms copy, 248 ms
// rollback keeping one row, 105 ms per further row, for 0.46 GB of state;
// taken here as copy + rollback keeping two rows, 437 ms per 0.46 GB.
const specSecondsPerByte = 0.437 / 0.46e9

// project runs the projection: for each budget, batch and disk rate,
// plain and speculative decoding of trs costed by the projected
// checkpoint's plans (without and with speculation's memory).
func project(trs []transcript, rr replayRun) ([]projRow, error) {
	var rows []projRow
	type ins struct{ plain, spec *k3.Inspection }
	byBatch := map[int]ins{}
	for _, b := range rr.batches {
		plainIn, err := k3.Inspect(rr.project, k3.Options{Sessions: b})
		if err != nil {
			return nil, err
		}
		specIn, err := k3.Inspect(rr.project, k3.Options{Sessions: b, Speculate: rr.spec})
		if err != nil {
			return nil, err
		}
		byBatch[b] = ins{plainIn, specIn}
	}
	for _, budget := range rr.budgets {
		for _, b := range rr.batches {
			plainIn, specIn := byBatch[b].plain, byBatch[b].spec
			pp, err1 := plainIn.PlanSessions(budget, b, 0)
			sp, err2 := specIn.PlanSessions(budget, b, 0)
			for _, g := range rr.gbps {
				row := projRow{Budget: budget, Batch: b, GBps: g}
				if err1 == nil && err2 == nil {
					row.Fits = true
					pc := projCost(plainIn, pp, g)
					sc := projCost(specIn, sp, g)
					if pc.Seconds(1, 0) <= 0 {
						// Everything resident: a pass reads nothing, and the
						// projection (reads only) has no time to compare.
						row.Resident = true
						rows = append(rows, row)
						continue
					}
					maxSpec := sp.SpecSlots
					row.Plain = simulate(trs, b, 0, pc, maxSpec)
					row.Spec = simulate(trs, b, rr.spec, sc, maxSpec)
					row.Speedup = row.Plain.SPerToken / row.Spec.SPerToken
				}
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// projCost is the planner's pass model of a plan at a disk rate.
func projCost(in *k3.Inspection, mp *k3.MemoryPlan, gbps float64) specpolicy.Cost {
	c := in.Config
	hit := min(1, float64(mp.CacheSlots)/float64(in.Sizes.Experts))
	cost := specpolicy.Cost{
		TrunkBytes:     float64(mp.TrunkBytesPerPass),
		ExpertBytes:    float64(c.MoELayers) * float64(in.Sizes.ExpertBytes) * (1 - hit),
		Experts:        c.Experts,
		TopK:           c.TopK,
		BytesPerSecond: gbps * 1e9,
	}
	if mp.SpecSlots > 0 {
		cost.SpecSeq = specSecondsPerByte * float64(mp.SpecBytes) / float64(mp.SpecSlots)
	}
	return cost
}

func printReplay(w io.Writer, rep *replayReport) {
	fmt.Fprintf(w, "%d transcripts (%s), %d assistant turns, %d tokens; speculation %s\n", rep.Transcripts, rep.Subset, rep.Turns, rep.Tokens, rep.Spec)
	line := func(name string, s replayStats) {
		fmt.Fprintf(w, "  %-6s %10.4f s/token %8.3f tokens/pass %8.3f rows/pass %12s/token  (%d tokens, %d passes, %d drafted, %d accepted)\n",
			name, s.SPerToken, s.TokensPerPass, s.RowsPerPass, planner.Human(int64(s.BytesPerToken)), s.Tokens, s.Passes, s.Drafted, s.Accepted)
	}
	if r := rep.Replay; r != nil {
		fmt.Fprintf(w, "replay on %s (budget %s; %d distinct ids, %d folded), exact %v:\n", r.Model, budgetName(r.Budget), r.Distinct, r.Folded, r.Exact)
		line("plain", r.Plain)
		line("spec", r.Spec)
		fmt.Fprintf(w, "  speedup %.3fx\n", r.Speedup)
	}
	if len(rep.Projection) > 0 {
		fmt.Fprintf(w, "projection (%s):\n", rep.Note)
		fmt.Fprintf(w, "  %10s %6s %6s %12s %12s %10s %10s %10s %9s\n", "budget", "batch", "GB/s", "plain s/tok", "spec s/tok", "tok/pass", "rows/pass", "GB/token", "speedup")
		for _, r := range rep.Projection {
			if !r.Fits || r.Resident {
				what := "does not fit"
				if r.Resident {
					what = "everything resident: nothing read, nothing to project"
				}
				fmt.Fprintf(w, "  %10s %6d %6g   %s\n", planner.Human(r.Budget), r.Batch, r.GBps, what)
				continue
			}
			fmt.Fprintf(w, "  %10s %6d %6g %12.3f %12.3f %10.3f %10.3f %10.2f %8.3fx\n", planner.Human(r.Budget), r.Batch, r.GBps,
				r.Plain.SPerToken, r.Spec.SPerToken, r.Spec.TokensPerPass, r.Spec.RowsPerPass, r.Spec.BytesPerToken/1e9, r.Speedup)
		}
	}
}

func budgetName(b int64) string {
	if b <= 0 {
		return "unlimited"
	}
	return planner.Human(b)
}

// parseGBps reads a comma-separated list of disk rates.
func parseGBps(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%g", &v); err != nil || v <= 0 {
			return nil, cli.Usagef("--gbps: bad bandwidth %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// forced is a constraint that allows exactly one sequence of tokens: the
// model is made to produce a transcript's turn, and a drafted token is
// accepted exactly when it is the turn's next token.
type forced []int

func (f forced) NewMatcher() grammar.Matcher { return &forcedMatcher{ids: f} }

type forcedMatcher struct {
	ids []int
	n   int
}

func (m *forcedMatcher) FillMask(mask []uint64) error {
	clear(mask)
	if m.n < len(m.ids) {
		id := m.ids[m.n]
		if id>>6 >= len(mask) {
			return fmt.Errorf("token %d beyond the mask", id)
		}
		mask[id>>6] |= 1 << (id & 63)
	}
	return nil
}

func (m *forcedMatcher) Allowed(id int) bool { return m.n < len(m.ids) && m.ids[m.n] == id }

func (m *forcedMatcher) Accept(id int) error {
	if !m.Allowed(id) {
		return fmt.Errorf("token %d: %w", id, grammar.ErrNotAllowed)
	}
	m.n++
	return nil
}

func (m *forcedMatcher) CanEnd() bool { return m.n == len(m.ids) }
func (m *forcedMatcher) Done() bool   { return m.n == len(m.ids) }

func (m *forcedMatcher) Rollback(n int) error {
	if n < 0 || n > m.n {
		return fmt.Errorf("rollback of %d of %d tokens", n, m.n)
	}
	m.n -= n
	return nil
}

func (m *forcedMatcher) Accepted() int { return m.n }

func (m *forcedMatcher) Clone() grammar.Matcher { c := *m; return &c }

// replayModel replays trs on the model: every assistant turn, plainly and
// then with speculation (rr.spec), each in a fresh session whose prompt
// is the turn's conversation so far (restored from the prefix cache after
// the first time), timing the decode from the turn's first token to its
// last.
func replayModel(mf *cli.ModelFlags, rep *replayReport, trs []transcript, rr replayRun, stderr io.Writer) error {
	ctx, cancel := cli.SignalContext()
	defer cancel()
	maxContext := 0
	for _, tr := range trs {
		maxContext = max(maxContext, tr.turns[len(tr.turns)-1][1])
	}
	// The prompts of a transcript's turns share their prefixes: the
	// prefix cache restores them. Its RAM tier only (--prefix-cache-ram,
	// default 1 GiB, inside the budget): a save is a copy made before the
	// turn's first token, while the disk tier's write-behind would run
	// during the timed decode of one run and not the other.
	ram := int64(1 << 30)
	if mf.Prefix.RAM != "" {
		n, err := cli.ParseSize(mf.Prefix.RAM)
		if err != nil || n <= 0 {
			return cli.Usagef("--prefix-cache-ram: want a positive size for --replay")
		}
		ram = n
	}
	edit := func(o *k3.Options) {
		o.Speculate, o.Sessions = rr.spec, 1
		o.MaxContext = max(o.MaxContext, maxContext+k3.MaxSpeculate+2)
		o.PrefixCache = &k3.PrefixCacheOptions{RAMBytes: ram, DiskBytes: -1}
	}
	// The floors: plain, and with speculation's buffers (auto decodes
	// plainly below that).
	if opts, err := mf.Options(); err == nil {
		edit(&opts)
		plain, spec := opts, opts
		plain.Speculate, spec.Speculate = 0, max(rr.spec, k3.AutoDraft)
		a, err1 := k3.Inspect(mf.Dir, plain)
		b, err2 := k3.Inspect(mf.Dir, spec)
		if err1 == nil && err2 == nil {
			fmt.Fprintf(stderr, "bench: floor %s, with speculation's buffers %s (budget %s)\n", planner.Human(a.FloorBytes), planner.Human(b.FloorBytes), budgetName(opts.RAMBudget))
		}
	}
	m, err := mf.OpenWith(ctx, edit)
	if err != nil {
		return err
	}
	defer m.Close()
	V := m.Config().Vocab
	distinct, folded := remap(trs, V)
	r := &replayModelResult{Model: mf.Dir, Budget: m.Stats().BudgetBytes, Distinct: distinct, Folded: folded, Exact: true}
	run := func(prompt, turn []int, spec int, st *replayStats) error {
		s := m.NewSession()
		defer s.Close()
		var first k3.Stats
		var t0 time.Time
		n := 0
		for tok, err := range s.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: len(turn), Speculate: spec, Constraint: forced(turn)}) {
			if err != nil {
				return err
			}
			if tok.ID != turn[n] {
				r.Exact = false
			}
			if n == 0 {
				first, t0 = m.Stats(), time.Now()
			}
			n++
		}
		el := time.Since(t0).Seconds()
		d := m.Stats().Sub(first)
		if n != len(turn) {
			r.Exact = false
		}
		dr, ac := s.Speculation()
		st.Tokens += int64(n - 1)
		st.Passes += d.Passes
		st.SeqPasses += d.Passes
		st.Rows += d.Rows
		st.Drafted += dr
		st.Accepted += ac
		st.Bytes += d.BytesRead
		st.Seconds += el
		return nil
	}
	done := 0
	for _, tr := range trs {
		for k, t := range tr.turns {
			if t[1]-t[0] < 2 {
				continue
			}
			prompt, turn := tr.ids[:t[0]], tr.ids[t[0]:t[1]]
			// Plain first on every other turn, speculation first on the
			// others: the run after a prefill and the one after a restore
			// trade places, and so does the machine's drift.
			order := []int{0, rr.spec}
			if done%2 == 1 {
				order = []int{rr.spec, 0}
			}
			for _, spec := range order {
				st, name := &r.Plain, "plain"
				if spec != 0 {
					st, name = &r.Spec, "speculating"
				}
				if err := run(prompt, turn, spec, st); err != nil {
					return fmt.Errorf("%s turn %d, %s: %w", tr.name, k, name, err)
				}
			}
			done++
			r.Plain.finish()
			r.Spec.finish()
			fmt.Fprintf(stderr, "bench: %s turn %d (%d of %d): %d tokens; so far plain %.3f s/token, spec %.3f s/token (%.2f tokens/pass)\n",
				tr.name, k, done, rep.Turns, len(turn), r.Plain.SPerToken, r.Spec.SPerToken, r.Spec.TokensPerPass)
		}
	}
	r.Plain.finish()
	r.Spec.finish()
	if r.Spec.SPerToken > 0 {
		r.Speedup = r.Plain.SPerToken / r.Spec.SPerToken
	}
	rep.Replay = r
	return nil
}
