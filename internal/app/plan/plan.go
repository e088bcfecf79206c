// Package plan is "k3 plan": a projection, from the memory planner and a
// model of the expert union, of what decoding and prefilling cost at given
// budgets and disk bandwidths, in one process and (--ranks) on clusters of
// ranks with a network between them. It reads no weights, so it works on a
// header-only checkpoint (k3 synth --profile full --sparse) as well as on a
// real one.
package plan

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/engine/planner"
)

// planRow is one (budget, batch) cell of k3 plan.
type planRow struct {
	Budget int64 `json:"budget_bytes"`
	Batch  int   `json:"batch"`
	Fits   bool  `json:"fits"`
	// The engine's own memory plan for that many sessions.
	TrunkBytesPerPass int64   `json:"trunk_bytes_per_pass"`
	CacheSlots        int     `json:"cache_slots"`
	ExpertUnion       float64 `json:"expert_union_per_layer"`
	ExpertHitRate     float64 `json:"expert_hit_rate"`
	BytesPerPass      int64   `json:"bytes_per_pass"`
	BytesPerToken     int64   `json:"bytes_per_token"`
	// SPerToken[i] is the s/token of one sequence at GBps[i]: a pass
	// (one token of every sequence) takes BytesPerPass / bandwidth.
	SPerToken       []float64 `json:"s_per_token"`
	TokensPerSecond []float64 `json:"aggregate_tokens_per_s"`
}

// prefillRow is one (budget, prompt length) cell of the prefill
// projection: a prompt prefilled in passes of the planner's rows, cold, or
// with all but its last CachedTail tokens in the prefix cache's disk tier.
type prefillRow struct {
	Budget       int64 `json:"budget_bytes"`
	PromptTokens int   `json:"prompt_tokens"`
	Fits         bool  `json:"fits"`
	// Rows is the planner's rows per pass (its choice for the budget), and
	// Passes the passes a cold prefill takes.
	Rows   int `json:"rows_per_pass"`
	Passes int `json:"passes"`
	// ColdBytes is what a cold prefill reads: every pass's streamed trunk
	// and the union of the experts its rows chose, less the cache's hits.
	ColdBytes           int64     `json:"cold_bytes"`
	BytesPerPromptToken int64     `json:"bytes_per_prompt_token"`
	ColdSeconds         []float64 `json:"cold_seconds"`
	// CachedBytes is a prefill whose prefix is restored: the cached
	// positions' MLA cache rows and one recurrent state read from the
	// disk tier, then the last CachedTail tokens prefilled.
	CachedTail    int       `json:"cached_tail"`
	CachedBytes   int64     `json:"cached_bytes"`
	CachedSeconds []float64 `json:"cached_seconds"`
	Chunk64Bytes  int64     `json:"chunk64_bytes"`
}

// workRow is where one budget goes for one kind of work: the plan the
// engine takes for it (the resting plan for decoding; for prompts
// waiting, the plan of wider passes it moves to while they prefill).
type workRow struct {
	Budget     int64  `json:"budget_bytes"`
	Work       string `json:"work"`
	DecodeRows int    `json:"decode_rows"`
	PromptRows int    `json:"prompt_rows"`
	Fits       bool   `json:"fits"`
	Resting    bool   `json:"resting_plan"`
	Rows       int    `json:"rows_per_pass"`
	// Where the budget goes: pinned trunk parts, the streaming ring, the
	// expert cache, the pass's scratch.
	PinnedBytes       int64 `json:"pinned_trunk_bytes"`
	RingBytes         int64 `json:"ring_bytes"`
	CacheBytes        int64 `json:"expert_cache_bytes"`
	ScratchBytes      int64 `json:"scratch_bytes"`
	TrunkBytesPerPass int64 `json:"trunk_bytes_per_pass"`
	Passes            int   `json:"passes"`
	BytesRead         int64 `json:"bytes_read"`
}

type planReport struct {
	Model      string       `json:"model"`
	Projection string       `json:"projection"`
	GBps       []float64    `json:"gbps"`
	UnionModel string       `json:"union_model"`
	Rows       []planRow    `json:"rows"`
	Work       []workRow    `json:"work"`
	Prefill    []prefillRow `json:"prefill"`
	// Cluster is the projection of clusters (--ranks), with its network.
	Cluster *clusterReport `json:"cluster,omitempty"`
}

// workloads are the kinds of work k3 plan shows the budget's split for:
// decoding alone, a long prompt, and prompts among decoding sequences.
var workloads = []struct {
	name           string
	decode, prompt int
}{
	{"decode-only", 1, 0},
	{"prompt-heavy", 0, 10000},
	{"mixed", 4, 2000},
}

// cachedTail is the new part of a prompt whose prefix is cached in the
// projection: an agent's next turn (a tool result and a message).
const cachedTail = 512

// Run is "k3 plan" with args (the subcommand's flags): it projects what
// batching buys at given budgets, what prefilling prompts costs cold and
// with a cached prefix, and with --ranks what clusters of ranks read and
// exchange per token, from the engine's memory planner and a model of the
// expert union.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("plan", "--model DIR [--budget 8GB,32GB,128GB] [--batch 1,4,16,64] [--gbps 6,14] [--trace FILE] [--ranks 1,8,16 [--net-latency 50us] [--net-gbps 3.125]] [--json]", stderr)
	dir := fs.String("model", "", "checkpoint `directory` (only config.json and the shard headers are read)")
	budgets := fs.String("budget", "8GB,32GB,128GB", "comma-separated RAM `budgets`")
	batches := fs.String("batch", "1,4,16,64", "comma-separated batch `sizes` (sessions decoding together)")
	gbps := fs.String("gbps", "6,14", "comma-separated disk `bandwidths` in GB/s")
	maxContext := fs.Int("max-context", 4096, "positions per session")
	prompts := fs.String("prompts", "1000,10000,100000", "comma-separated prompt `lengths` for the prefill projection (0 skips it)")
	trace := fs.String("trace", "", "expert trace `file` (int32 layer, expert pairs, top-k per layer per token, as fixtures/expert_trace.bin) to measure the union of B tokens instead of assuming uniform routing")
	ranks := fs.String("ranks", "", "comma-separated cluster `sizes` to project (each rank with --budget and a disk of --gbps), e.g. 1,8,16")
	netLatency := fs.Duration("net-latency", 50*time.Microsecond, "one round trip between rank 0 and a worker (with --ranks)")
	netGBps := fs.Float64("net-gbps", 3.125, "rank 0's network link in GB/s (3.125: 25 Gbit/s Ethernet; with --ranks)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	var pf cli.ProgressFlag
	pf.Register(fs)
	cli.InputDirs(fs, "model")
	cli.InputFiles(fs, "trace")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return cli.Usagef("--model is required")
	}
	mode, err := pf.Mode()
	if err != nil {
		return err
	}
	var bs []int64
	for _, s := range strings.Split(*budgets, ",") {
		n, err := cli.ParseSize(s)
		if err != nil || n <= 0 {
			return cli.Usagef("--budget: bad size %q", s)
		}
		bs = append(bs, n)
	}
	ns, err := cli.ParseBatchSizes(*batches)
	if err != nil {
		return err
	}
	var ps []int
	if *prompts != "0" {
		if ps, err = cli.ParseBatchSizes(*prompts); err != nil {
			return cli.Usagef("--prompts: want positive lengths, e.g. 1000,10000,100000")
		}
	}
	var bw []float64
	for _, s := range strings.Split(*gbps, ",") {
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &v); err != nil || v <= 0 {
			return cli.Usagef("--gbps: bad bandwidth %q", s)
		}
		bw = append(bw, v)
	}
	var rs []int
	if *ranks != "" {
		for _, f := range strings.Split(*ranks, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > maxRanks {
				return cli.Usagef("--ranks: bad cluster size %q (want 1 to %d ranks, e.g. 1,8,16)", f, maxRanks)
			}
			rs = append(rs, n)
		}
	}
	if *netLatency < 0 || !(*netGBps > 0) || math.IsInf(*netGBps, 0) {
		return cli.Usagef("--net-latency must be at least 0 and --net-gbps a positive bandwidth (have %v, %g)", *netLatency, *netGBps)
	}
	steps := cli.NewSteps(stderr, mode)
	defer steps.Done()
	steps.Step("reading %s", cli.CheckpointFiles(*dir))
	in, err := k3.Inspect(*dir, k3.Options{MaxContext: *maxContext})
	if err != nil {
		return err
	}
	steps.Step("planning %d budgets × %d batch sizes and %d prompt lengths", len(bs), len(ns), len(ps))
	c := in.Config
	union := func(b int) float64 { // uniform routing
		return float64(c.Experts) * (1 - math.Pow(1-float64(c.TopK)/float64(c.Experts), float64(b)))
	}
	rep := planReport{Model: *dir, GBps: bw, UnionModel: "uniform: E·(1−(1−K/E)^B)",
		Projection: "a projection from the memory planner and a union model, not a measurement: reads only, compute and overlap not modelled"}
	if *trace != "" {
		u, err := traceUnion(*trace, c.TopK)
		if err != nil {
			return err
		}
		union = u
		rep.UnionModel = "measured on " + *trace + ": mean distinct experts per layer over B tokens drawn from different positions"
	}
	for _, budget := range bs {
		for _, b := range ns {
			row := planRow{Budget: budget, Batch: b}
			mp, err := in.PlanSessions(budget, b, 0) // the rows Open chooses
			if err == nil {
				row.Fits = true
				row.TrunkBytesPerPass = mp.TrunkBytesPerPass
				row.CacheSlots = mp.CacheSlots
				row.ExpertUnion = union(b)
				row.ExpertHitRate, row.BytesPerPass = passBytes(mp, k3.ExpertShare{Units: in.Sizes.Experts, ExpertBytes: in.Sizes.ExpertBytes},
					c.MoELayers, row.ExpertUnion)
				row.BytesPerToken = row.BytesPerPass / int64(b)
				for _, g := range bw {
					s := float64(row.BytesPerPass) / (g * 1e9)
					row.SPerToken = append(row.SPerToken, s)
					row.TokensPerSecond = append(row.TokensPerSecond, float64(b)/math.Max(s, 1e-9))
				}
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	for _, budget := range bs {
		for _, wl := range workloads {
			row := workRow{Budget: budget, Work: wl.name, DecodeRows: wl.decode, PromptRows: wl.prompt}
			wp, err := in.PlanWork(budget, max(wl.decode, 1), k3.Workload{DecodeRows: wl.decode, PromptRows: wl.prompt})
			if err == nil {
				mp := wp.Plan
				row.Fits, row.Resting, row.Rows = true, wp.Resting, mp.Rows
				row.PinnedBytes, row.RingBytes = mp.PinnedBytes, int64(mp.RingSlots)*mp.RingSlotBytes
				row.CacheBytes, row.ScratchBytes = int64(mp.CacheSlots)*mp.CacheSlotBytes, mp.ScratchBytes
				row.TrunkBytesPerPass, row.Passes, row.BytesRead = mp.TrunkBytesPerPass, wp.Passes, wp.BytesRead
			}
			rep.Work = append(rep.Work, row)
		}
	}
	for _, budget := range bs {
		for _, n := range ps {
			row, err := prefill(in, budget, n, union, bw)
			if err != nil {
				return err
			}
			rep.Prefill = append(rep.Prefill, row)
		}
	}
	if len(rs) > 0 {
		net := network{Latency: *netLatency, GBps: *netGBps}
		if rep.Cluster, err = projectClusters(in, rs, bs, ns, union, bw, net); err != nil {
			return err
		}
	}
	steps.Done()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	fmt.Fprintf(stdout, "%s: %d layers, %d experts per layer, top %d; %s\n", *dir, c.Layers, c.Experts, c.TopK, rep.Projection)
	fmt.Fprintf(stdout, "union model: %s\n", rep.UnionModel)
	fmt.Fprintf(stdout, "%10s %6s %10s %8s %12s %12s", "budget", "batch", "union/layer", "hit", "GB/pass", "GB/token")
	for _, g := range bw {
		fmt.Fprintf(stdout, " %14s", fmt.Sprintf("s/tok@%gGB/s", g))
	}
	fmt.Fprintln(stdout)
	for _, r := range rep.Rows {
		if !r.Fits {
			fmt.Fprintf(stdout, "%10s %6d   does not fit: %d sessions' state exceeds the budget\n", planner.Human(r.Budget), r.Batch, r.Batch)
			continue
		}
		fmt.Fprintf(stdout, "%10s %6d %10.1f %7.1f%% %12.1f %12.1f", planner.Human(r.Budget), r.Batch, r.ExpertUnion, 100*r.ExpertHitRate,
			float64(r.BytesPerPass)/1e9, float64(r.BytesPerToken)/1e9)
		for _, s := range r.SPerToken {
			fmt.Fprintf(stdout, " %14.2f", s)
		}
		fmt.Fprintln(stdout)
	}
	if len(rep.Work) > 0 {
		fmt.Fprintf(stdout, "\nwhere the budget goes for the work waiting (decode-only: the resting plan; with prompts waiting the engine moves to wider passes and back):\n")
		fmt.Fprintf(stdout, "%10s %-12s %8s %7s %6s %12s %10s %12s %10s %12s %7s %9s\n", "budget", "work", "decoding", "prompt",
			"rows", "pinned trunk", "ring", "expert cache", "scratch", "trunk/pass", "passes", "GB read")
		for _, r := range rep.Work {
			if !r.Fits {
				fmt.Fprintf(stdout, "%10s %-12s %8d %7d   does not fit: %d sessions' state exceeds the budget\n", planner.Human(r.Budget), r.Work,
					r.DecodeRows, r.PromptRows, max(r.DecodeRows, 1))
				continue
			}
			fmt.Fprintf(stdout, "%10s %-12s %8d %7d %6d %12s %10s %12s %10s %12s %7d %9.1f\n", planner.Human(r.Budget), r.Work, r.DecodeRows, r.PromptRows, r.Rows,
				planner.Human(r.PinnedBytes), planner.Human(r.RingBytes), planner.Human(r.CacheBytes), planner.Human(r.ScratchBytes),
				planner.Human(r.TrunkBytesPerPass), r.Passes, float64(r.BytesRead)/1e9)
		}
	}
	if len(rep.Prefill) > 0 {
		fmt.Fprintf(stdout, "\nprefill: passes of the rows the engine takes for the prompt; cached = all but the last %d tokens restored from the prefix cache's disk tier\n", cachedTail)
		fmt.Fprintf(stdout, "%10s %8s %6s %7s %14s %12s", "budget", "prompt", "rows", "passes", "GB/prompt-tok", "vs chunk 64")
		for _, g := range bw {
			fmt.Fprintf(stdout, " %16s %16s", fmt.Sprintf("cold s@%gGB/s", g), fmt.Sprintf("cached s@%gGB/s", g))
		}
		fmt.Fprintln(stdout)
		for _, r := range rep.Prefill {
			if !r.Fits {
				fmt.Fprintf(stdout, "%10s %8d   does not fit: the prompt's MLA cache and state exceed the budget\n", planner.Human(r.Budget), r.PromptTokens)
				continue
			}
			fmt.Fprintf(stdout, "%10s %8d %6d %7d %14.3f %11.2fx", planner.Human(r.Budget), r.PromptTokens, r.Rows, r.Passes,
				float64(r.BytesPerPromptToken)/1e9, float64(r.ColdBytes)/float64(max(r.Chunk64Bytes, 1)))
			for i := range r.ColdSeconds {
				fmt.Fprintf(stdout, " %16.1f %16.1f", r.ColdSeconds[i], r.CachedSeconds[i])
			}
			fmt.Fprintln(stdout)
		}
	}
	if rep.Cluster != nil {
		printClusters(stdout, rep.Cluster, bw)
	}
	return nil
}

// passBytes is what one pass reads on a rank planned by mp whose share of
// the routed experts is x: its streamed trunk, and the union's experts
// that miss its cache. The cache holds CacheSlots of x.Units (experts, or
// experts' halves on a rank of a cluster); with no knowledge of which, a
// needed one is there with that probability.
func passBytes(mp *k3.MemoryPlan, x k3.ExpertShare, moeLayers int, union float64) (hit float64, bytes int64) {
	hit = min(1, float64(mp.CacheSlots)/float64(x.Units))
	experts := float64(moeLayers) * union * (1 - hit) * float64(x.ExpertBytes)
	return hit, mp.TrunkBytesPerPass + int64(experts)
}

// traceUnion reads an expert trace (int32 layer, expert pairs in request
// order, k per layer per token) and returns the mean number of distinct
// experts per layer over b tokens drawn without replacement from the
// trace's tokens, averaged over random draws. The t-th run of k choices of
// a layer is token t's, whatever the interleaving of layers. Different
// positions stand in for different sequences.
func traceUnion(path string, k int) (func(int) float64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw)%8 != 0 || len(raw) == 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a list of int32 pairs", path, len(raw))
	}
	byLayer := map[int32][]int32{}
	for i := 0; i < len(raw); i += 8 {
		l := int32(binary.LittleEndian.Uint32(raw[i:]))
		byLayer[l] = append(byLayer[l], int32(binary.LittleEndian.Uint32(raw[i+4:])))
	}
	tokens := -1
	var layers [][]int32
	for l, es := range byLayer {
		if len(es)%k != 0 || (tokens >= 0 && len(es)/k != tokens) {
			return nil, fmt.Errorf("%s: layer %d has %d choices: not whole tokens of top %d like the other layers", path, l, len(es), k)
		}
		tokens = len(es) / k
		layers = append(layers, es)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	return func(b int) float64 {
		const draws = 64
		var sum float64
		seen := map[int32]bool{}
		for d := 0; d < draws; d++ {
			perm := rng.Perm(tokens)
			for _, es := range layers {
				clear(seen)
				// More sequences than traced tokens: tokens are reused, an
				// underestimate of the union.
				for j := 0; j < b; j++ {
					t := perm[j%tokens]
					for _, e := range es[t*k : (t+1)*k] {
						seen[e] = true
					}
				}
				sum += float64(len(seen))
			}
		}
		return sum / float64(draws*len(layers))
	}, nil
}

// prefill projects the prefill of an n-token prompt at a budget: the
// planner's plan for one session of n positions (and the rows it then
// chooses), its passes, and their bytes; a prompt that does not fit (its
// MLA cache and state) is marked so.
func prefill(in *k3.Inspection, budget int64, n int, union func(int) float64, bw []float64) (prefillRow, error) {
	row := prefillRow{Budget: budget, PromptTokens: n, CachedTail: min(cachedTail, n)}
	in, err := in.WithMaxContext(n + 1)
	if err != nil {
		return row, err
	}
	wp, err := in.PlanWork(budget, 1, k3.Workload{PromptRows: n})
	if err != nil {
		return row, nil // does not fit
	}
	mp := wp.Plan // the plan the engine moves to for this prompt
	row.Fits, row.Rows = true, mp.Rows
	hit := min(1, float64(mp.CacheSlots)/float64(in.Sizes.Experts))
	moe := float64(in.Config.MoELayers) * float64(in.Sizes.ExpertBytes) * (1 - hit)
	// passes of rows rows over m tokens: the full ones, then the rest.
	cost := func(m, rows int) (int64, int) {
		full, rest := m/rows, m%rows
		b := float64(full) * (float64(mp.TrunkBytesPerPass) + moe*union(rows))
		passes := full
		if rest > 0 {
			b += float64(mp.TrunkBytesPerPass) + moe*union(rest)
			passes++
		}
		return int64(b), passes
	}
	row.ColdBytes, row.Passes = cost(n, mp.Rows)
	row.BytesPerPromptToken = row.ColdBytes / int64(n)
	row.Chunk64Bytes, _ = cost(n, 64)
	// A restore reads the cached positions' MLA cache rows and one
	// recurrent state (the plan's per-session figures), then prefills the
	// tail.
	perPos := float64(mp.KVBytes) / float64(mp.Sessions*(n+1))
	state := float64(mp.StateBytes) / float64(mp.Sessions)
	tail, _ := cost(row.CachedTail, mp.Rows)
	row.CachedBytes = int64(perPos*float64(n-row.CachedTail)+state) + tail
	for _, g := range bw {
		row.ColdSeconds = append(row.ColdSeconds, float64(row.ColdBytes)/(g*1e9))
		row.CachedSeconds = append(row.CachedSeconds, float64(row.CachedBytes)/(g*1e9))
	}
	return row, nil
}
