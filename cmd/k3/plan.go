package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
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

type planReport struct {
	Model      string    `json:"model"`
	Projection string    `json:"projection"`
	GBps       []float64 `json:"gbps"`
	UnionModel string    `json:"union_model"`
	Rows       []planRow `json:"rows"`
}

// runPlan projects what batching buys at given budgets from the engine's
// memory planner and a model of the expert union: no weights are read, so
// it works on a header-only checkpoint (k3 synth --profile full
// --sparse) as well as on a real one.
func runPlan(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("plan", "--model DIR [--budget 8GB,32GB,128GB] [--batch 1,4,16,64] [--gbps 6,14] [--trace FILE] [--json]", stderr)
	dir := fs.String("model", "", "checkpoint `directory` (only config.json and the shard headers are read)")
	budgets := fs.String("budget", "8GB,32GB,128GB", "comma-separated RAM `budgets`")
	batches := fs.String("batch", "1,4,16,64", "comma-separated batch `sizes` (sessions decoding together)")
	gbps := fs.String("gbps", "6,14", "comma-separated disk `bandwidths` in GB/s")
	maxContext := fs.Int("max-context", 4096, "positions per session")
	trace := fs.String("trace", "", "expert trace `file` (int32 layer, expert pairs, top-k per layer per token, as fixtures/expert_trace.bin) to measure the union of B tokens instead of assuming uniform routing")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return cli.Usagef("--model is required")
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
	var bw []float64
	for _, s := range strings.Split(*gbps, ",") {
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &v); err != nil || v <= 0 {
			return cli.Usagef("--gbps: bad bandwidth %q", s)
		}
		bw = append(bw, v)
	}
	in, err := k3.Inspect(*dir, k3.Options{MaxContext: *maxContext})
	if err != nil {
		return err
	}
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
	moeLayers := int64(c.MoELayers)
	for _, budget := range bs {
		for _, b := range ns {
			row := planRow{Budget: budget, Batch: b}
			mp, err := in.PlanSessions(budget, b, max(b, 64))
			if err == nil {
				row.Fits = true
				row.TrunkBytesPerPass = mp.TrunkBytesPerPass
				row.CacheSlots = mp.CacheSlots
				row.ExpertUnion = union(b)
				// The cache holds CacheSlots of the checkpoint's experts; with
				// no knowledge of which, a needed expert is there with that
				// probability.
				row.ExpertHitRate = min(1, float64(mp.CacheSlots)/float64(in.Sizes.Experts))
				experts := float64(moeLayers) * row.ExpertUnion * (1 - row.ExpertHitRate) * float64(in.Sizes.ExpertBytes)
				row.BytesPerPass = mp.TrunkBytesPerPass + int64(experts)
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
			fmt.Fprintf(stdout, "%10s %6d   does not fit: %d sessions' state exceeds the budget\n", human(r.Budget), r.Batch, r.Batch)
			continue
		}
		fmt.Fprintf(stdout, "%10s %6d %10.1f %7.1f%% %12.1f %12.1f", human(r.Budget), r.Batch, r.ExpertUnion, 100*r.ExpertHitRate,
			float64(r.BytesPerPass)/1e9, float64(r.BytesPerToken)/1e9)
		for _, s := range r.SPerToken {
			fmt.Fprintf(stdout, " %14.2f", s)
		}
		fmt.Fprintln(stdout)
	}
	return nil
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
