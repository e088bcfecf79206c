package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// benchResult is what k3 bench measures; --json prints it as one object.
type benchResult struct {
	Model       string `json:"model"`
	BudgetBytes int64  `json:"budget_bytes"`
	Threads     int    `json:"threads"`
	Kernels     string `json:"kernels"`
	Cold        string `json:"cold,omitempty"`
	Trunk       string `json:"trunk,omitempty"`

	LoadSeconds       float64 `json:"load_seconds"`
	PromptLen         int     `json:"prompt_len"`
	PrefillSeconds    float64 `json:"prefill_seconds"`
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	// The prefill's passes, their rows, and the bytes it read per prompt
	// token (trunk and experts, the first token's decode included).
	PrefillPasses        int64   `json:"prefill_passes"`
	PrefillRowsPerPass   int     `json:"prefill_rows_per_pass"`
	PrefillBytesPerToken int64   `json:"prefill_bytes_per_prompt_token"`
	DecodeTokens         int     `json:"decode_tokens"`
	DecodeSPerToken      float64 `json:"decode_s_per_token"`
	DecodeTokensPerS     float64 `json:"decode_tokens_per_s"`
	// What a decoded token read, in parts that add up: the streamed
	// trunk, the routed experts the cache missed, the embedding rows (when
	// the table is not resident), and the rest, the direct reads'
	// alignment padding (and re-reads).
	BytesReadPerToken    int64   `json:"bytes_read_per_token"`
	TrunkBytesPerToken   int64   `json:"trunk_bytes_per_token"`
	ExpertBytesPerTok    int64   `json:"expert_bytes_per_token"`
	EmbedBytesPerToken   int64   `json:"embed_bytes_per_token"`
	ReloadBytesPerToken  int64   `json:"reload_bytes_per_token,omitempty"` // trunk parts pinned again after a plan move
	PaddingBytesPerToken int64   `json:"padding_bytes_per_token"`
	ReadGBps             float64 `json:"read_gbps"`
	DeviceGBps           float64 `json:"device_gbps,omitempty"`
	// DeviceNote says how the device was measured, or why it was not
	// (then DeviceGBps and the I/O roofline are absent, not zero).
	DeviceNote      string  `json:"device_note,omitempty"`
	IOWaitSPerToken float64 `json:"io_wait_s_per_token"`
	MeasuredCompute float64 `json:"measured_compute_s_per_token"`
	OtherSPerToken  float64 `json:"other_s_per_token"`
	CacheHitRate    float64 `json:"cache_hit_rate"`
	// PlanMoves counts the engine's moves between the memory plans of the
	// budget over the whole run (to wider passes for the prompt, back to
	// the resting plan for decoding), ReloadedBytes what they read to pin
	// trunk parts again (in the bytes read, not in the trunk's).
	PlanMoves     int64 `json:"plan_moves"`
	ReloadedBytes int64 `json:"reloaded_bytes"`
	// PeakRSSBytes is the process's measured peak resident set (its
	// high-water mark, VmHWM on Linux) over the whole run.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// Cluster is a run over a cluster's (--peers): its gathers per decoded
	// token, their bytes and time (absent in one process).
	Cluster *cli.ClusterJSON `json:"cluster,omitempty"`
	// PlannedBytes is what the memory plan reserves at this budget, and
	// FloorBytes the smallest budget for these options, as k3 doctor and
	// the error refusing a smaller budget report it: both are upper bounds
	// (a full context's KV cache, a full pass's scratch, the threads'
	// stacks, the collector's headroom, the whole executable), so a short
	// run's peak is below them.
	PlannedBytes int64 `json:"planned_bytes"`
	FloorBytes   int64 `json:"floor_bytes"`
	// A compressed packed trunk: the bytes decoded per token, the decode
	// core time per token (summed over blocks) and the rate per core.
	TrunkDecodedPerToken int64   `json:"trunk_decoded_bytes_per_token,omitempty"`
	DecodeCoreSPerToken  float64 `json:"decode_core_s_per_token,omitempty"`
	DecodeGBpsPerCore    float64 `json:"decode_gbps_per_core,omitempty"`

	// The roofline for this run: the bytes it had to read over the
	// device's bandwidth, and the compute time at the kernels' rates
	// measured in the same process.
	RooflineSPerToken float64 `json:"roofline_s_per_token,omitempty"`
	ComputeSPerToken  float64 `json:"compute_s_per_token"`
	BF16GFLOPs        float64 `json:"bf16_gflops"`
	MXFP4GFLOPs       float64 `json:"mxfp4_gflops"`
	BoundSPerToken    float64 `json:"bound_s_per_token"`
	VsBound           float64 `json:"decode_vs_bound"`
}

// benchRun is one bench run's settings.
type benchRun struct {
	tokens, promptLen int
	seed              uint64
	cold              bool
	probe             int64
	device            float64 // already measured: skip the probe
	compression       k3.Compression
}

// benchOne opens the model with one packed trunk (or none) and measures a
// prefill and the decode steps.
func benchOne(ctx context.Context, mf *cli.ModelFlags, trunk string, budget int64, run benchRun, stderr io.Writer) (*benchResult, error) {
	tokens, promptLen, seed, cold, pb := &run.tokens, &run.promptLen, &run.seed, &run.cold, run.probe
	r := &benchResult{Model: mf.Dir, BudgetBytes: budget, PromptLen: *promptLen, DecodeTokens: *tokens,
		Kernels: tensor.Implementation() + "/" + quant.Implementation(), Trunk: trunk, DeviceGBps: run.device}
	// The options every model command opens with (the same floor as k3
	// doctor's), with room for the prompt and the decoded tokens.
	one := *mf
	one.Trunk = trunk // of a --trunk A,B list
	opts, err := one.Options()
	if err != nil {
		return nil, err
	}
	opts.RAMBudget, opts.TrunkCompression = budget, run.compression
	if need := *promptLen + *tokens + 1; max(opts.MaxContext, 4096) < need {
		opts.MaxContext = need
	}
	// Everything measured outside the engine is measured before Open,
	// inside the budget, and freed before the engine plans its memory:
	// the checkpoint's sizes, the device probe's buffers, the kernels'
	// test matrices.
	in, err := k3.Inspect(mf.Dir, opts)
	if err != nil {
		return nil, err
	}
	sz, cfg := in.Sizes, in.Config
	r.FloorBytes = in.FloorBytes
	if budget > 0 {
		if _, err := in.Plan(budget); err != nil {
			return nil, err
		}
	}
	in = nil
	releaseHeap()

	shards, err := filepath.Glob(filepath.Join(mf.Dir, "*.safetensors"))
	if err != nil || len(shards) == 0 {
		return nil, fmt.Errorf("%s: %w: no *.safetensors files", mf.Dir, k3.ErrBadCheckpoint)
	}
	if trunk != "" {
		shards = append(shards, filepath.Join(trunk, "trunk.bin"))
	}
	if *cold {
		r.Cold = dropCaches(shards)
	}
	// What may be allocated outside the engine before Open: the budget
	// less the executable and a margin for the runtime.
	room := int64(math.MaxInt64)
	if budget > 0 {
		room = budget - rss.ExecutableBytes() - 32<<20
	}
	switch {
	case pb <= 0:
		r.DeviceNote = "not measured (--probe-size 0)"
	case run.device > 0:
		// Measured in this process already (the first of several trunks).
	default:
		chunk, qd := probeShape(room / 2)
		if chunk == 0 {
			fmt.Fprintf(stderr, "bench: the budget leaves no room for the device probe's buffers; skipped\n")
			r.DeviceNote = "unmeasured: the budget leaves no room for the probe's buffers"
		} else if r.DeviceGBps, r.DeviceNote, err = measureDevice(ctx, mf.Dir, shards, pb, chunk, qd, stderr); err != nil {
			return nil, fmt.Errorf("device probe: %w", err)
		}
	}
	r.Threads = mf.Threads
	if r.Threads == 0 {
		r.Threads = defaultThreads()
	}
	fmt.Fprintf(stderr, "bench: measuring the kernels...\n")
	r.BF16GFLOPs, r.MXFP4GFLOPs = kernelRates(cfg, r.Threads, room/2)
	releaseHeap()

	start := time.Now()
	m, err := k3.OpenContext(ctx, mf.Dir, opts)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	r.LoadSeconds = time.Since(start).Seconds()
	fmt.Fprintf(stderr, "bench: loaded in %.1f s\n", r.LoadSeconds)

	rng := rand.New(rand.NewPCG(*seed, 0))
	prompt := make([]int, *promptLen)
	for i := range prompt {
		prompt[i] = rng.IntN(cfg.Vocab)
	}
	// The first token comes out of the prefill; every later one is one
	// decode step.
	var st1 k3.Stats
	var cs1 k3.ClusterStats
	var decodeStart time.Time
	n := 0
	watch, err := mf.Progress.Watch(m, stderr)
	if err != nil {
		return nil, err
	}
	defer watch.Close()
	logw := watch.Text(stderr)
	watch.Start()
	gctx := watch.Prefill(ctx, len(prompt))
	st0 := m.Stats()
	start = time.Now()
	for _, err := range m.Generate(gctx, prompt, k3.GenerateOptions{MaxTokens: *tokens + 1}) {
		if err != nil {
			return nil, err
		}
		watch.Token()
		if n == 0 {
			r.PrefillSeconds = time.Since(start).Seconds()
			r.PrefillTokensPerS = float64(*promptLen) / r.PrefillSeconds
			fmt.Fprintf(logw, "bench: prefill %d tokens in %.2f s; decoding %d tokens...\n", *promptLen, r.PrefillSeconds, *tokens)
			st1 = m.Stats()
			cs1 = m.Cluster()
			decodeStart = time.Now()
			p := st1.Sub(st0)
			r.PrefillPasses = p.Passes
			if p.Passes > 0 {
				r.PrefillRowsPerPass = int(p.Rows / p.Passes)
			}
			r.PrefillBytesPerToken = p.BytesRead / int64(*promptLen)
		}
		n++
	}
	decode := time.Since(decodeStart).Seconds()
	watch.Close()
	d := m.Stats().Sub(st1)
	steps := float64(n - 1)
	r.DecodeSPerToken = decode / steps
	r.DecodeTokensPerS = 1 / r.DecodeSPerToken
	r.BytesReadPerToken = int64(float64(d.BytesRead) / steps)
	r.TrunkBytesPerToken = int64(float64(d.TrunkBytesRead) / steps)
	r.ExpertBytesPerTok = int64(float64(d.ExpertBytesRead) / steps)
	r.EmbedBytesPerToken = int64(float64(d.EmbedBytesRead) / steps)
	r.ReloadBytesPerToken = int64(float64(d.ReloadedBytes) / steps)
	r.PaddingBytesPerToken = r.BytesReadPerToken - r.TrunkBytesPerToken - r.ExpertBytesPerTok - r.EmbedBytesPerToken - r.ReloadBytesPerToken
	r.ReadGBps = d.ReadGBps()
	r.IOWaitSPerToken = d.WaitTime.Seconds() / steps
	r.MeasuredCompute = d.ComputeTime.Seconds() / steps
	r.OtherSPerToken = (decode - d.ForwardTime.Seconds()) / steps
	if req := d.CacheHits + d.CacheMisses; req > 0 {
		r.CacheHitRate = float64(d.CacheHits) / float64(req)
	}
	end := m.Stats()
	r.PeakRSSBytes, r.PlannedBytes = end.PeakRSSBytes, end.PlannedBytes
	if cs := m.Cluster(); cs.Ranks > 1 {
		cs.Rounds -= cs1.Rounds
		cs.BytesSent -= cs1.BytesSent
		cs.BytesReceived -= cs1.BytesReceived
		cs.RoundTime -= cs1.RoundTime
		cs.WaitTime -= cs1.WaitTime
		r.Cluster = cli.NewClusterJSON(cs, int(steps))
	}
	r.PlanMoves, r.ReloadedBytes = end.PlanMoves-st0.PlanMoves, end.ReloadedBytes-st0.ReloadedBytes
	if d.TrunkDecodedBytes > 0 {
		r.TrunkDecodedPerToken = int64(float64(d.TrunkDecodedBytes) / steps)
		r.DecodeCoreSPerToken = d.TrunkDecodeTime.Seconds() / steps
		r.DecodeGBpsPerCore = float64(d.TrunkDecodedBytes) / d.TrunkDecodeTime.Seconds() / 1e9
	}

	flops := func(macs int64, gflops float64) float64 {
		if gflops <= 0 {
			return 0
		}
		return 2 * float64(macs) / (gflops * 1e9)
	}
	r.ComputeSPerToken = flops(sz.TrunkMACs+sz.LMHeadMACs, r.BF16GFLOPs) + flops(sz.ExpertMACs*sz.ExpertsPerTok, r.MXFP4GFLOPs)
	if r.DeviceGBps > 0 {
		r.RooflineSPerToken = float64(r.BytesReadPerToken) / (r.DeviceGBps * 1e9)
	}
	r.BoundSPerToken = max(r.RooflineSPerToken, r.ComputeSPerToken)
	if r.BoundSPerToken > 0 {
		r.VsBound = r.DecodeSPerToken / r.BoundSPerToken
	}
	return r, nil
}

func printBench(w io.Writer, r *benchResult) {
	budget := "unlimited"
	if r.BudgetBytes > 0 {
		budget = human(r.BudgetBytes)
	}
	fmt.Fprintf(w, "model %s, budget %s, %d threads, kernels %s\n", r.Model, budget, r.Threads, r.Kernels)
	if r.Trunk != "" {
		fmt.Fprintf(w, "packed trunk    %s\n", r.Trunk)
	}
	if r.Cold != "" {
		fmt.Fprintf(w, "cold start: %s\n", r.Cold)
	}
	fmt.Fprintf(w, "load            %8.2f s\n", r.LoadSeconds)
	fmt.Fprintf(w, "prefill         %8.2f tokens/s (%d tokens in %.2f s, %d passes of %d rows, %.1f MB read per prompt token)\n", r.PrefillTokensPerS, r.PromptLen, r.PrefillSeconds,
		r.PrefillPasses, r.PrefillRowsPerPass, float64(r.PrefillBytesPerToken)/1e6)
	fmt.Fprintf(w, "decode          %8.3f s/token (%.2f tokens/s over %d tokens)\n", r.DecodeSPerToken, r.DecodeTokensPerS, r.DecodeTokens)
	device := fmt.Sprintf("device %.2f GB/s", r.DeviceGBps)
	if r.DeviceGBps <= 0 {
		device = "device unmeasured"
	}
	if r.DeviceNote != "" {
		device += " (" + r.DeviceNote + ")"
	}
	reload := ""
	if r.ReloadBytesPerToken > 0 {
		reload = ", trunk parts pinned again after a plan move " + human(r.ReloadBytesPerToken)
	}
	fmt.Fprintf(w, "read per token  %8s (trunk %s, experts %s, embedding rows %s%s, alignment of direct reads %s) at %.2f GB/s; %s\n",
		human(r.BytesReadPerToken), human(r.TrunkBytesPerToken), human(r.ExpertBytesPerTok), human(r.EmbedBytesPerToken),
		reload, human(r.PaddingBytesPerToken), r.ReadGBps, device)
	if r.TrunkDecodedPerToken > 0 {
		fmt.Fprintf(w, "trunk decode    %8s decoded per token, %.3f core-s per token, %.2f GB/s per core\n",
			human(r.TrunkDecodedPerToken), r.DecodeCoreSPerToken, r.DecodeGBpsPerCore)
	}
	fmt.Fprintf(w, "time per token  waiting for weights %.3f s, compute %.3f s, other %.3f s\n", r.IOWaitSPerToken, r.MeasuredCompute, r.OtherSPerToken)
	fmt.Fprintf(w, "cache hit rate  %8.1f %%\n", 100*r.CacheHitRate)
	if r.Cluster != nil {
		fmt.Fprintf(w, "cluster         %s (decode)\n", r.Cluster)
	}
	if r.PlanMoves > 0 {
		fmt.Fprintf(w, "memory plan     %d moves (wider passes for the prompt, back for decoding), %s read to pin trunk parts again\n", r.PlanMoves, human(r.ReloadedBytes))
	}
	fmt.Fprintf(w, "peak RSS        %8s measured (the process's high-water mark); the plan reserves %s and the floor is %s, upper bounds: they count a full context's KV cache, a full pass's scratch, 32 threads' stacks, the collector's headroom and the whole executable, which a short run does not all touch\n",
		human(r.PeakRSSBytes), human(r.PlannedBytes), human(r.FloorBytes))
	ioBound := "I/O unmeasured (no device bandwidth; the bound is compute only)"
	if r.DeviceGBps > 0 {
		ioBound = fmt.Sprintf("I/O %.3f s/token (bytes ÷ device)", r.RooflineSPerToken)
	}
	fmt.Fprintf(w, "roofline        %s, compute %.3f s/token (BF16 %.1f, MXFP4 %.1f GFLOP/s); decode is %.2f× the bound\n",
		ioBound, r.ComputeSPerToken, r.BF16GFLOPs, r.MXFP4GFLOPs, r.VsBound)
}

// releaseHeap collects what the measurements before Open left and returns
// it to the system, so that the engine's plan starts from an empty heap.
func releaseHeap() {
	runtime.GC()
	debug.FreeOSMemory()
}

func defaultThreads() int { return runtime.GOMAXPROCS(0) }

// human formats a byte count as the planner and k3 doctor do.
func human(n int64) string { return planner.Human(n) }
