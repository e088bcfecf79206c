package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/benchdata"
	"github.com/k3go/k3/internal/par"
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

func runBench(args []string, stdout, stderr io.Writer) error {
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
	r := &benchResult{Model: mf.dir, BudgetBytes: budget, PromptLen: *promptLen, DecodeTokens: *tokens,
		Kernels: tensor.Implementation() + "/" + quant.Implementation()}

	shards, err := filepath.Glob(filepath.Join(mf.dir, "*.safetensors"))
	if err != nil || len(shards) == 0 {
		return fmt.Errorf("%s: %w: no *.safetensors files", mf.dir, k3.ErrBadCheckpoint)
	}
	if mf.trunk != "" {
		shards = append(shards, filepath.Join(mf.trunk, "trunk.bin"))
	}
	if *cold {
		r.Cold = dropCaches(shards)
	}
	if pb > 0 {
		if r.DeviceGBps, r.DeviceNote, err = measureDevice(ctx, mf.dir, shards, pb, stderr); err != nil {
			return fmt.Errorf("device probe: %w", err)
		}
	} else {
		r.DeviceNote = "not measured (--probe 0)"
	}

	start := time.Now()
	m, err := k3.OpenContext(ctx, mf.dir, k3.Options{Threads: mf.threads, MaxContext: max(mf.maxContext, *promptLen+*tokens+1),
		RAMBudget: budget, TrunkDir: mf.trunk})
	if err != nil {
		return err
	}
	defer m.Close()
	r.LoadSeconds = time.Since(start).Seconds()
	cfg := m.Config()
	r.Threads = mf.threads
	if r.Threads == 0 {
		r.Threads = defaultThreads()
	}
	fmt.Fprintf(stderr, "bench: loaded in %.1f s; measuring the kernels...\n", r.LoadSeconds)
	r.BF16GFLOPs, r.MXFP4GFLOPs = kernelRates(cfg, r.Threads)

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
			return err
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

	in, err := k3.Inspect(mf.dir, k3.Options{MaxContext: max(mf.maxContext, *promptLen+*tokens+1)})
	if err != nil {
		return err
	}
	sz := in.Sizes
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
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	printBench(stdout, r)
	return nil
}

func printBench(w io.Writer, r *benchResult) {
	budget := "unlimited"
	if r.BudgetBytes > 0 {
		budget = human(r.BudgetBytes)
	}
	fmt.Fprintf(w, "model %s, budget %s, %d threads, kernels %s\n", r.Model, budget, r.Threads, r.Kernels)
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
	fmt.Fprintf(w, "time per token  waiting for weights %.3f s, compute %.3f s, other %.3f s\n", r.IOWaitSPerToken, r.MeasuredCompute, r.OtherSPerToken)
	fmt.Fprintf(w, "cache hit rate  %8.1f %%\n", 100*r.CacheHitRate)
	fmt.Fprintf(w, "peak RSS        %8s\n", human(r.PeakRSSBytes))
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

// probeChunk is the size of the device probe's reads: large enough that
// the device, not the per-request cost, sets the rate.
const probeChunk = 16 << 20

// measureDevice measures the read bandwidth of the device holding the
// checkpoint with about n bytes of O_DIRECT reads and says how. It reads the
// checkpoint's own files when at least one holds a probeChunk; a small
// checkpoint (tiny, quickstart) gets a temporary file of n bytes written
// next to it, on the same file system, and removed. A device that cannot be
// measured (no space for the file, a refused write) is no failure: the
// note says why and the I/O roofline is left out. Only cancellation is an
// error.
func measureDevice(ctx context.Context, dir string, shards []string, n int64, stderr io.Writer) (float64, string, error) {
	if largestFile(shards) >= probeChunk {
		fmt.Fprintf(stderr, "bench: measuring the device with %s of O_DIRECT reads of the checkpoint...\n", human(n))
		gbps, err := deviceBandwidth(ctx, shards, n)
		if err == nil || ctx.Err() != nil {
			return gbps, "random 16 MiB reads of the checkpoint", err
		}
		fmt.Fprintf(stderr, "bench: reading the checkpoint failed (%v); trying a temporary file\n", err)
	}
	size := iox.AlignUp(max(n, 2*probeChunk))
	fmt.Fprintf(stderr, "bench: the checkpoint's files are too small to probe; measuring the device with a temporary file of %s in %s...\n", human(size), dir)
	res, err := iox.ProbeBandwidth(ctx, dir, iox.ProbeOptions{FileSize: size, QueueDepths: []int{8}, ChunkSize: probeChunk,
		RandomReadSize: probeChunk, RandomReads: int(size / probeChunk), SmallReads: 1})
	if ctx.Err() != nil {
		return 0, "", ctx.Err()
	}
	if err != nil || len(res.Runs) == 0 || res.Runs[0].Random.GBps() <= 0 {
		fmt.Fprintf(stderr, "bench: device unmeasured: %v\n", err)
		return 0, fmt.Sprintf("unmeasured: %v", err), nil
	}
	note := fmt.Sprintf("random 16 MiB reads of a temporary %s file", human(size))
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
// 16 MiB windows, 8 reads in flight, with O_DIRECT, and returns GB/s.
func deviceBandwidth(ctx context.Context, paths []string, n int64) (float64, error) {
	const chunk = probeChunk
	const qd = 8
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
	rd, err := iox.NewReader(iox.ReaderOptions{QueueDepth: qd, ChunkSize: chunk})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	bufs := make([]*iox.Buffer, qd)
	for i := range bufs {
		if bufs[i], err = iox.AllocAligned(chunk, iox.BufferOptions{HugePages: true, Populate: true}); err != nil {
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
			futs[k] = rd.Submit(ctx, iox.Request{Src: s, Off: off, Len: chunk, Dst: bufs[k].Bytes()[:chunk]})
		} else {
			futs[k] = nil
		}
	}
	return float64(done) / time.Since(start).Seconds() / 1e9, nil
}

// kernelRates measures the BF16 and MXFP4 mat-vec rates at this model's
// shapes with the given threads, in GFLOP/s.
func kernelRates(c k3.Config, threads int) (bf16, mx float64) {
	pool := par.New(threads)
	defer pool.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	rows, cols := c.KDAWidth(), c.Hidden
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
