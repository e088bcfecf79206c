package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/internal/testkit/benchdata"
	"github.com/k3go/k3/iox"
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

	LoadSeconds        float64 `json:"load_seconds"`
	PromptLen          int     `json:"prompt_len"`
	PrefillSeconds     float64 `json:"prefill_seconds"`
	PrefillTokensPerS  float64 `json:"prefill_tokens_per_s"`
	DecodeTokens       int     `json:"decode_tokens"`
	DecodeSPerToken    float64 `json:"decode_s_per_token"`
	DecodeTokensPerS   float64 `json:"decode_tokens_per_s"`
	BytesReadPerToken  int64   `json:"bytes_read_per_token"`
	TrunkBytesPerToken int64   `json:"trunk_bytes_per_token"`
	ExpertBytesPerTok  int64   `json:"expert_bytes_per_token"`
	ReadGBps           float64 `json:"read_gbps"`
	DeviceGBps         float64 `json:"device_gbps,omitempty"`
	// DeviceNote says how the device was measured, or why it was not
	// (then DeviceGBps and the I/O roofline are absent, not zero).
	DeviceNote      string  `json:"device_note,omitempty"`
	IOWaitSPerToken float64 `json:"io_wait_s_per_token"`
	MeasuredCompute float64 `json:"measured_compute_s_per_token"`
	OtherSPerToken  float64 `json:"other_s_per_token"`
	CacheHitRate    float64 `json:"cache_hit_rate"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	// FloorBytes is the smallest budget for these options, as k3 doctor
	// and the error refusing a smaller budget report it.
	FloorBytes int64 `json:"floor_bytes"`
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

func runBench(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "--model DIR [--budget SIZE | --preset NAME] [--tokens N] [--prompt-len P] [--cold] [--batch 1,4,8,16 [--check]] [--json]", stderr)
	var mf modelFlags
	mf.register(fs)
	tokens := fs.Int("tokens", 8, "tokens to decode")
	promptLen := fs.Int("prompt-len", 16, "prompt tokens to prefill")
	cold := fs.Bool("cold", false, "start from a cold page cache (drops the checkpoint's cached pages where the OS allows)")
	probeBytes := fs.String("probe", "2GiB", "bytes read with O_DIRECT to measure the device bandwidth: random 16 MiB reads of the checkpoint, or of a temporary file this size written beside it when its files are smaller (0 skips it, and the I/O roofline is left out)")
	seed := fs.Uint64("seed", 1, "seed of the random prompt")
	asJSON := fs.Bool("json", false, "print one JSON object")
	batchSizes := fs.String("batch", "", "batch `sizes`, e.g. 1,4,8,16: decode that many sessions at once for each and print a table of aggregate speed, bytes per token and passes (skips the device probe and roofline)")
	check := fs.Bool("check", false, "with --batch: fail unless every sequence of every batch generates the same tokens as when it runs alone")
	maxBatch := fs.Int("max-batch", 0, "with --batch: most token `rows` per pass (0 = the largest batch plus 64, one prefill chunk)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (go tool pprof)")
	specKs := fs.String("spec", "", "speculative decoding: draft lengths `k`, e.g. 1,2,4,8; decodes plainly, then with each k, in one process, and reports s/token, passes and bytes per token and accepted drafts per pass next to plain decoding (skips the device probe and roofline)")
	rounds := fs.Int("rounds", 1, "with --trunk A,B: bench the trunks this many `rounds`, in reverse order every other round (A B, B A, ...), and report each trunk's median and its ratio to the first trunk within each round, so that a machine's drift cancels")
	compression := fs.String("compression", "on", "with a compressed --trunk: on (decode it), off (read the shards) or auto (the engine measures and decides)")
	drafter := fs.String("drafter", "ngram", "with --spec: ngram (prompt lookup, on a prompt that repeats itself) or ceiling (drafts the plain run's own tokens: every draft right)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if mf.dir == "" {
		return usagef("--model is required")
	}
	if *tokens < 1 || *promptLen < 1 {
		return usagef("--tokens and --prompt-len must be at least 1")
	}
	if *specKs != "" {
		ks, err := parseBatchSizes(*specKs)
		if err != nil {
			return usagef("--spec: want positive draft lengths, e.g. 1,2,4,8")
		}
		if *drafter != "ngram" && *drafter != "ceiling" {
			return usagef("--drafter must be ngram or ceiling, not %q", *drafter)
		}
		if *batchSizes != "" {
			return usagef("give --spec or --batch, not both")
		}
		return benchSpec(&mf, benchSpecRun{ks: ks, drafter: *drafter, tokens: *tokens, promptLen: *promptLen, seed: *seed, json: *asJSON}, stdout, stderr)
	}
	if *batchSizes != "" {
		bs, err := parseBatchSizes(*batchSizes)
		if err != nil {
			return err
		}
		if *maxBatch < 0 {
			return usagef("--max-batch must not be negative")
		}
		if *cold {
			fmt.Fprintln(stderr, "bench: --cold applies before the first batch only")
		}
		return benchBatches(&mf, benchBatchRun{sizes: bs, tokens: *tokens, promptLen: *promptLen, seed: *seed,
			check: *check, maxBatch: *maxBatch, cold: *cold, json: *asJSON}, stdout, stderr)
	}
	if *check || *maxBatch != 0 {
		return usagef("--check and --max-batch apply to --batch only")
	}
	pb, err := parseSize(*probeBytes)
	if err != nil {
		return usagef("--probe: %v", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	budget, err := mf.budget.bytes()
	if err != nil {
		return err
	}
	comp, ok := map[string]k3.Compression{"on": k3.CompressionOn, "off": k3.CompressionOff, "auto": k3.CompressionAuto}[*compression]
	if !ok {
		return usagef("--compression must be on, off or auto, not %q", *compression)
	}
	// --trunk A,B benches each packed trunk in turn in this process (the
	// device probe once), then compares them: an uncompressed and a
	// compressed pack side by side.
	trunks := []string{mf.trunk}
	if strings.Contains(mf.trunk, ",") {
		trunks = strings.Split(mf.trunk, ",")
	}
	if *rounds < 1 || (*rounds > 1 && len(trunks) < 2) {
		return usagef("--rounds needs at least 1, and more than 1 only with two or more --trunk directories")
	}
	var results []*benchResult
	byRound := make([][]*benchResult, *rounds) // in trunks' order
	var device float64
	for round := range *rounds {
		byRound[round] = make([]*benchResult, len(trunks))
		for k := range trunks {
			i := k
			if round%2 == 1 {
				i = len(trunks) - 1 - k
			}
			tr := trunks[i]
			run := benchRun{tokens: *tokens, promptLen: *promptLen, seed: *seed, cold: *cold, probe: pb, device: device, compression: comp}
			if len(trunks) > 1 {
				fmt.Fprintf(stderr, "bench: round %d of %d, trunk %d of %d: %s\n", round+1, *rounds, i+1, len(trunks), tr)
			}
			if len(results) > 0 {
				resetPeakRSS()
			}
			r, err := benchOne(ctx, &mf, tr, budget, run, stderr)
			if err != nil {
				return err
			}
			device = r.DeviceGBps
			results = append(results, r)
			byRound[round][i] = r
		}
	}
	if *asJSON {
		if len(results) == 1 {
			return json.NewEncoder(stdout).Encode(results[0])
		}
		return json.NewEncoder(stdout).Encode(results)
	}
	for _, r := range results {
		printBench(stdout, r)
	}
	if len(results) > 1 {
		printTrunkComparison(stdout, results)
	}
	if *rounds > 1 {
		printRoundSummary(stdout, byRound)
	}
	return nil
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
func benchOne(ctx context.Context, mf *modelFlags, trunk string, budget int64, run benchRun, stderr io.Writer) (*benchResult, error) {
	tokens, promptLen, seed, cold, pb := &run.tokens, &run.promptLen, &run.seed, &run.cold, run.probe
	r := &benchResult{Model: mf.dir, BudgetBytes: budget, PromptLen: *promptLen, DecodeTokens: *tokens,
		Kernels: tensor.Implementation() + "/" + quant.Implementation(), Trunk: trunk, DeviceGBps: run.device}
	// The options every model command opens with (the same floor as k3
	// doctor's), with room for the prompt and the decoded tokens.
	opts := k3.Options{Threads: mf.threads, MaxContext: mf.maxContext, RAMBudget: budget, TrunkDir: trunk, TrunkCompression: run.compression}
	if need := *promptLen + *tokens + 1; max(opts.MaxContext, 4096) < need {
		opts.MaxContext = need
	}
	// Everything measured outside the engine is measured before Open,
	// inside the budget, and freed before the engine plans its memory:
	// the checkpoint's sizes, the device probe's buffers, the kernels'
	// test matrices.
	in, err := k3.Inspect(mf.dir, opts)
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

	shards, err := filepath.Glob(filepath.Join(mf.dir, "*.safetensors"))
	if err != nil || len(shards) == 0 {
		return nil, fmt.Errorf("%s: %w: no *.safetensors files", mf.dir, k3.ErrBadCheckpoint)
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
		r.DeviceNote = "not measured (--probe 0)"
	case run.device > 0:
		// Measured in this process already (the first of several trunks).
	default:
		chunk, qd := probeShape(room / 2)
		if chunk == 0 {
			fmt.Fprintf(stderr, "bench: the budget leaves no room for the device probe's buffers; skipped\n")
			r.DeviceNote = "unmeasured: the budget leaves no room for the probe's buffers"
		} else if r.DeviceGBps, r.DeviceNote, err = measureDevice(ctx, mf.dir, shards, pb, chunk, qd, stderr); err != nil {
			return nil, fmt.Errorf("device probe: %w", err)
		}
	}
	r.Threads = mf.threads
	if r.Threads == 0 {
		r.Threads = defaultThreads()
	}
	fmt.Fprintf(stderr, "bench: measuring the kernels...\n")
	r.BF16GFLOPs, r.MXFP4GFLOPs = kernelRates(cfg, r.Threads, room/2)
	releaseHeap()

	start := time.Now()
	m, err := k3.OpenContext(ctx, mf.dir, opts)
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
	var decodeStart time.Time
	n := 0
	start = time.Now()
	for _, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: *tokens + 1}) {
		if err != nil {
			return nil, err
		}
		if n == 0 {
			r.PrefillSeconds = time.Since(start).Seconds()
			r.PrefillTokensPerS = float64(*promptLen) / r.PrefillSeconds
			fmt.Fprintf(stderr, "bench: prefill %d tokens in %.2f s; decoding %d tokens...\n", *promptLen, r.PrefillSeconds, *tokens)
			st1 = m.Stats()
			decodeStart = time.Now()
		}
		n++
	}
	decode := time.Since(decodeStart).Seconds()
	d := m.Stats().Sub(st1)
	steps := float64(n - 1)
	r.DecodeSPerToken = decode / steps
	r.DecodeTokensPerS = 1 / r.DecodeSPerToken
	r.BytesReadPerToken = int64(float64(d.BytesRead) / steps)
	r.TrunkBytesPerToken = int64(float64(d.TrunkBytesRead) / steps)
	r.ExpertBytesPerTok = int64(float64(d.ExpertBytesRead) / steps)
	r.ReadGBps = d.ReadGBps()
	r.IOWaitSPerToken = d.WaitTime.Seconds() / steps
	r.MeasuredCompute = d.ComputeTime.Seconds() / steps
	r.OtherSPerToken = (decode - d.ForwardTime.Seconds()) / steps
	if req := d.CacheHits + d.CacheMisses; req > 0 {
		r.CacheHitRate = float64(d.CacheHits) / float64(req)
	}
	r.PeakRSSBytes = m.Stats().PeakRSSBytes
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
	fmt.Fprintf(w, "prefill         %8.2f tokens/s (%d tokens in %.2f s)\n", r.PrefillTokensPerS, r.PromptLen, r.PrefillSeconds)
	fmt.Fprintf(w, "decode          %8.3f s/token (%.2f tokens/s over %d tokens)\n", r.DecodeSPerToken, r.DecodeTokensPerS, r.DecodeTokens)
	device := fmt.Sprintf("device %.2f GB/s", r.DeviceGBps)
	if r.DeviceGBps <= 0 {
		device = "device unmeasured"
	}
	if r.DeviceNote != "" {
		device += " (" + r.DeviceNote + ")"
	}
	fmt.Fprintf(w, "read per token  %8s (trunk %s, experts %s) at %.2f GB/s; %s\n",
		human(r.BytesReadPerToken), human(r.TrunkBytesPerToken), human(r.ExpertBytesPerTok), r.ReadGBps, device)
	if r.TrunkDecodedPerToken > 0 {
		fmt.Fprintf(w, "trunk decode    %8s decoded per token, %.3f core-s per token, %.2f GB/s per core\n",
			human(r.TrunkDecodedPerToken), r.DecodeCoreSPerToken, r.DecodeGBpsPerCore)
	}
	fmt.Fprintf(w, "time per token  waiting for weights %.3f s, compute %.3f s, other %.3f s\n", r.IOWaitSPerToken, r.MeasuredCompute, r.OtherSPerToken)
	fmt.Fprintf(w, "cache hit rate  %8.1f %%\n", 100*r.CacheHitRate)
	fmt.Fprintf(w, "peak RSS        %8s (floor %s)\n", human(r.PeakRSSBytes), human(r.FloorBytes))
	ioBound := "I/O unmeasured (no device bandwidth; the bound is compute only)"
	if r.DeviceGBps > 0 {
		ioBound = fmt.Sprintf("I/O %.3f s/token (bytes ÷ device)", r.RooflineSPerToken)
	}
	fmt.Fprintf(w, "roofline        %s, compute %.3f s/token (BF16 %.1f, MXFP4 %.1f GFLOP/s); decode is %.2f× the bound\n",
		ioBound, r.ComputeSPerToken, r.BF16GFLOPs, r.MXFP4GFLOPs, r.VsBound)
}

// dropCaches evicts the checkpoint's pages from the page cache with
// POSIX_FADV_DONTNEED and says what it did.
func dropCaches(paths []string) string {
	var failed []string
	for _, p := range paths {
		f, err := iox.OpenFile(p, iox.FileOptions{})
		if err == nil {
			err = f.DropCache()
			f.Close()
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", filepath.Base(p), err))
		}
	}
	if len(failed) > 0 {
		return "page cache partly dropped (" + strings.Join(failed, "; ") + "); engine reads use O_DIRECT anyway"
	}
	return "checkpoint pages dropped from the page cache (POSIX_FADV_DONTNEED); engine reads use O_DIRECT"
}

// releaseHeap collects what the measurements before Open left and returns
// it to the system, so that the engine's plan starts from an empty heap.
func releaseHeap() {
	runtime.GC()
	debug.FreeOSMemory()
}

// probeShape returns the device probe's read size and reads in flight
// (16 MiB × 8) shrunk to fit room bytes of buffers; 0, 0 if even 1 MiB
// does not fit.
func probeShape(room int64) (chunk int64, qd int) {
	chunk, qd = 16<<20, 8
	for int64(qd)*chunk > room && qd > 1 {
		qd /= 2
	}
	for chunk > room && chunk > 1<<20 {
		chunk /= 2
	}
	if chunk > room {
		return 0, 0
	}
	return chunk, qd
}

// probeChunk is the size of the device probe's reads: large enough that
// the device, not the per-request cost, sets the rate.
const probeChunk = 16 << 20

// measureDevice measures the read bandwidth of the device holding the
// checkpoint with about n bytes of O_DIRECT reads of chunk bytes, qd in
// flight, and says how. It reads the
// checkpoint's own files when at least one holds a probeChunk; a small
// checkpoint (tiny, quickstart) gets a temporary file of n bytes written
// next to it, on the same file system, and removed. A device that cannot be
// measured (no space for the file, a refused write) is no failure: the
// note says why and the I/O roofline is left out. Only cancellation is an
// error.
func measureDevice(ctx context.Context, dir string, shards []string, n, chunk int64, qd int, stderr io.Writer) (float64, string, error) {
	if largestFile(shards) >= probeChunk {
		fmt.Fprintf(stderr, "bench: measuring the device with %s of O_DIRECT reads of the checkpoint...\n", human(n))
		gbps, err := deviceBandwidth(ctx, shards, n, chunk, qd)
		if err == nil || ctx.Err() != nil {
			return gbps, fmt.Sprintf("random %s reads of the checkpoint", human(chunk)), err
		}
		fmt.Fprintf(stderr, "bench: reading the checkpoint failed (%v); trying a temporary file\n", err)
	}
	size := iox.AlignUp(max(n, 2*chunk))
	fmt.Fprintf(stderr, "bench: the checkpoint's files are too small to probe; measuring the device with a temporary file of %s in %s...\n", human(size), dir)
	res, err := iox.ProbeBandwidth(ctx, dir, iox.ProbeOptions{FileSize: size, QueueDepths: []int{qd}, ChunkSize: int(chunk),
		RandomReadSize: int(chunk), RandomReads: int(size / chunk), SmallReads: 1})
	if ctx.Err() != nil {
		return 0, "", ctx.Err()
	}
	if err != nil || len(res.Runs) == 0 || res.Runs[0].Random.GBps() <= 0 {
		fmt.Fprintf(stderr, "bench: device unmeasured: %v\n", err)
		return 0, fmt.Sprintf("unmeasured: %v", err), nil
	}
	note := fmt.Sprintf("random %s reads of a temporary %s file", human(chunk), human(size))
	if !res.Direct {
		note += "; O_DIRECT refused, so the page cache may be in it"
	}
	return res.Runs[0].Random.GBps(), note, nil
}

// largestFile returns the size of the largest of paths that exists.
func largestFile(paths []string) int64 {
	var n int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			n = max(n, st.Size())
		}
	}
	return n
}

// deviceBandwidth reads about n bytes of the given files at random aligned
// windows of chunk bytes, qd reads in flight, with O_DIRECT, and returns
// GB/s.
func deviceBandwidth(ctx context.Context, paths []string, n, chunk int64, qd int) (float64, error) {
	type src struct {
		f    *iox.File
		size int64
	}
	var srcs []src
	var total int64
	for _, p := range paths {
		f, err := iox.OpenFile(p, iox.FileOptions{Direct: true})
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if f.Size() >= chunk {
			srcs = append(srcs, src{f, f.Size()})
			total += f.Size()
		}
	}
	if len(srcs) == 0 {
		return 0, fmt.Errorf("no file of at least %d bytes to read", chunk)
	}
	rd, err := iox.NewReader(iox.ReaderOptions{QueueDepth: qd, ChunkSize: int(chunk)})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	bufs := make([]*iox.Buffer, qd)
	for i := range bufs {
		if bufs[i], err = iox.AllocAligned(int(chunk), iox.BufferOptions{HugePages: true, Populate: true}); err != nil {
			return 0, err
		}
		defer bufs[i].Free()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	pick := func() (iox.Source, int64) {
		x := rng.Int64N(total)
		for _, s := range srcs {
			if x < s.size {
				off := rng.Int64N(s.size-chunk+1) &^ (iox.Align - 1)
				return s.f, off
			}
			x -= s.size
		}
		return srcs[0].f, 0
	}
	reads := max(int(n/chunk), qd)
	futs := make([]*iox.Future, qd)
	start := time.Now()
	var done int64
	for i := 0; i < reads+qd; i++ {
		k := i % qd
		if futs[k] != nil {
			if _, err := futs[k].Wait(); err != nil {
				return 0, err
			}
			<-futs[k].Released()
			done += chunk
		}
		if i < reads {
			s, off := pick()
			futs[k] = rd.Submit(ctx, iox.Request{Src: s, Off: off, Len: int(chunk), Dst: bufs[k].Bytes()[:chunk]})
		} else {
			futs[k] = nil
		}
	}
	return float64(done) / time.Since(start).Seconds() / 1e9, nil
}

// kernelRates measures the BF16 and MXFP4 mat-vec rates at this model's
// shapes with the given threads, in GFLOP/s; the BF16 matrix has fewer
// rows where its bytes would exceed room.
func kernelRates(c k3.Config, threads int, room int64) (bf16, mx float64) {
	pool := par.New(threads)
	defer pool.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	rows, cols := c.KDAHeads*c.KDAHeadDim, c.Hidden
	if fit := room / int64(2*cols); int64(rows) > fit {
		rows = max(int(fit)&^15, 16)
	}
	// Weights drawn like a trained model's: arbitrary bytes hold subnormals,
	// which cost Intel cores a microcode assist and understate the rate.
	w := tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, Data: benchdata.BF16Weights(rng, rows*cols)}
	x := benchdata.Activations(rng, cols)
	y := make([]float32, rows)
	bf16 = rate(func() { tensor.MatVec(pool, y, w, x) }, 2*float64(rows*cols))

	I, Lt := c.MoEIntermediate, c.LatentDim
	packed, scales := benchdata.MXFP4(rng, I, Lt)
	mxm := quant.Matrix{Rows: I, Cols: Lt, Packed: packed, Scales: scales}
	xl := benchdata.Activations(rng, Lt)
	yl := make([]float32, I)
	mx = rate(func() { quant.MatVec(pool, yl, mxm, xl) }, 2*float64(I*Lt))
	return bf16, mx
}

// rate runs f repeatedly for about 300 ms and returns the best GFLOP/s.
func rate(f func(), flop float64) float64 {
	var ts []time.Duration
	end := time.Now().Add(300 * time.Millisecond)
	for len(ts) < 3 || time.Now().Before(end) {
		t := time.Now()
		f()
		ts = append(ts, time.Since(t))
		if len(ts) > 10000 {
			break
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return flop / ts[len(ts)/4].Seconds() / 1e9
}

func defaultThreads() int { return runtime.GOMAXPROCS(0) }

// printTrunkComparison sets every run against the first (the baseline,
// e.g. the uncompressed pack).
func printTrunkComparison(w io.Writer, rs []*benchResult) {
	base := rs[0]
	fmt.Fprintf(w, "\ntrunk comparison against %s (same process, same prompt):\n", base.Trunk)
	fmt.Fprintf(w, "  %-40s %10s %8s %10s %8s %12s %14s\n", "trunk", "s/token", "ratio", "read/token", "ratio", "decode/token", "decode GB/s/core")
	for _, r := range rs {
		fmt.Fprintf(w, "  %-40s %10.3f %7.3f× %10s %7.3f× %11.3fs %14.2f\n", r.Trunk, r.DecodeSPerToken, r.DecodeSPerToken/base.DecodeSPerToken,
			human(r.BytesReadPerToken), float64(r.BytesReadPerToken)/float64(max(base.BytesReadPerToken, 1)), r.DecodeCoreSPerToken, r.DecodeGBpsPerCore)
	}
}

// printRoundSummary gives each trunk's median s/token over the rounds and
// its ratio to the first trunk measured in the same round (median, and
// the range over rounds): a drift of the machine between rounds moves
// both members of a round's pair alike.
func printRoundSummary(w io.Writer, byRound [][]*benchResult) {
	fmt.Fprintf(w, "\nover %d rounds (ratios against %s within each round):\n", len(byRound), byRound[0][0].Trunk)
	fmt.Fprintf(w, "  %-40s %14s %14s %16s %16s\n", "trunk", "median s/token", "median ratio", "ratio range", "read/token ratio")
	for i := range byRound[0] {
		var ts, ratios, bytes []float64
		for _, rs := range byRound {
			ts = append(ts, rs[i].DecodeSPerToken)
			ratios = append(ratios, rs[i].DecodeSPerToken/rs[0].DecodeSPerToken)
			bytes = append(bytes, float64(rs[i].BytesReadPerToken)/float64(max(rs[0].BytesReadPerToken, 1)))
		}
		lo, hi := slices.Min(ratios), slices.Max(ratios)
		read := "–" // nothing read: everything resident
		if byRound[0][0].BytesReadPerToken > 0 {
			read = fmt.Sprintf("%.3f×", median(bytes))
		}
		fmt.Fprintf(w, "  %-40s %14.3f %13.3f× %7.3f–%.3f× %16s\n", byRound[0][i].Trunk, median(ts), median(ratios), lo, hi, read)
	}
}

// median returns the middle of xs (the mean of the two middle values for
// an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// resetPeakRSS returns the previous run's memory to the OS and resets the
// kernel's peak RSS (VmHWM, by writing 5 to /proc/self/clear_refs where
// Linux allows it), so that each run's peak RSS is its own.
func resetPeakRSS() {
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}
