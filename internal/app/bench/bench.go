// Package bench is the k3 command's benchmarks: k3 bench measures one
// model's load, prefill and decode speed against the roofline (the bytes
// it reads over the device's measured bandwidth, the work at the kernels'
// measured rates), packed trunks side by side over rounds (--trunk A,B
// --rounds N), batches of sessions decoding together (--batch) and
// speculative decoding (--spec); k3 bench-serve measures the HTTP server
// end to end with concurrent streaming clients on loopback.
//
// Run and RunServe are the two subcommands, with the command's signature:
// they print to stdout and stderr and return an error whose exit code is
// cli.ExitCode's.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
)

// Run is k3 bench: args are its flags (k3 help bench lists them). stdin
// is not read.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("bench", "--model DIR [--budget SIZE | --preset NAME] [--tokens N] [--prompt-len P] [--cold] [--batch 1,4,8,16 [--check]] [--json]", stderr)
	var mf cli.ModelFlags
	mf.Register(fs)
	tokens := fs.Int("tokens", 8, "tokens to decode")
	promptLen := fs.Int("prompt-len", 16, "prompt tokens to prefill")
	cold := fs.Bool("cold", false, "start from a cold page cache (drops the checkpoint's cached pages where the OS allows)")
	probeBytes := fs.String("probe-size", "2GiB", "bytes read with O_DIRECT to measure the device bandwidth: random 16 MiB reads of the checkpoint, or of a temporary file this `size` written beside it when its files are smaller (0 skips it, and the I/O roofline is left out)")
	cli.Alias(fs, "probe", "probe-size") // its name before k3 doctor's --probe-size was taken for both
	seed := fs.Uint64("seed", 1, "seed of the random prompt")
	asJSON := fs.Bool("json", false, "print one JSON object")
	batchSizes := fs.String("batch", "", "batch `sizes`, e.g. 1,4,8,16: decode that many sessions at once for each and print a table of aggregate speed, bytes per token and passes (skips the device probe and roofline)")
	check := fs.Bool("check", false, "with --batch: fail unless every sequence of every batch generates the same tokens as when it runs alone")
	maxBatch := fs.Int("max-batch", 0, "with --batch: most token `rows` per pass (0 = the largest batch plus 64, one prefill chunk)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (go tool pprof)")
	specKs := fs.String("spec", "", "speculative decoding: draft lengths `k`, e.g. 1,2,4,8; decodes plainly, then with each k, in one process, and reports s/token, passes and bytes per token and accepted drafts per pass next to plain decoding (skips the device probe and roofline)")
	rounds := fs.Int("rounds", 1, "with --trunk A,B: bench the trunks this many `rounds`, in reverse order every other round (A B, B A, ...), and report each trunk's median and its ratio to the first trunk within each round, so that a machine's drift cancels")
	compression := fs.String("compression", "on", "with a compressed --trunk: on (decode it), off (read the shards) or auto (the engine measures and decides)")
	replay := fs.String("replay", "", "replay agent transcripts (a `file` or directory in the agent-traces schema): the model is made to produce each assistant turn's tokens, plainly and with speculative decoding, in one process; with --project, the planner's projection of the same decoding on another checkpoint")
	replayTok := fs.String("tokenizer", "", "with --replay: the tokenizer `directory` the transcripts are tokenized with (default: the model's)")
	subset := fs.String("subset", "all", "with --replay: all, even or odd (the transcripts at even or odd places in name order: tune on one half, report on the other)")
	files := fs.Int("files", 0, "with --replay: replay only the first `N` transcripts (0: all)")
	turns := fs.Int("turns", 0, "with --replay: replay only the first `N` assistant turns of each transcript, after --skip-turns (0: all)")
	skipTurns := fs.Int("skip-turns", 0, "with --replay: skip the first `N` assistant turns of each transcript (they stay in the later turns' prompts)")
	maxPrompt := fs.Int("max-prompt", 0, "with --replay: leave out the turns whose prompt (the conversation before them) is longer than `N` tokens (0: none), as a prompt costs a prefill")
	turnTokens := fs.Int("turn-tokens", 0, "with --replay: replay only the first `N` tokens of each turn (0: all)")
	projectDir := fs.String("project", "", "with --replay: project the same decoding on this checkpoint `directory` (headers only are read: k3 synth --profile full --sparse)")
	projBudgets := fs.String("project-budget", "8GB,32GB,128GB,512GB", "with --project: comma-separated RAM `budgets`")
	projBatches := fs.String("project-batch", "1,16", "with --project: comma-separated batch `sizes`")
	projGBps := fs.String("gbps", "6,14", "with --project: comma-separated disk `bandwidths` in GB/s")
	drafter := fs.String("drafter", "ngram", "with --spec: ngram (prompt lookup, on a prompt that repeats itself) or ceiling (drafts the plain run's own tokens: every draft right)")
	cli.InputPaths(fs, "replay")
	cli.InputDirs(fs, "tokenizer", "project")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if err := cli.FirstError(cli.Positive("tokens", *tokens), cli.Positive("prompt-len", *promptLen),
		cli.Positive("rounds", *rounds), cli.NotNegative("max-batch", *maxBatch, "the default"),
		cli.NotNegative("files", *files, "all"), cli.NotNegative("turns", *turns, "all"),
		cli.NotNegative("skip-turns", *skipTurns, "none"), cli.NotNegative("turn-tokens", *turnTokens, "all"),
		cli.NotNegative("max-prompt", *maxPrompt, "no limit")); err != nil {
		return err
	}
	if *subset != "all" && *subset != "even" && *subset != "odd" {
		return cli.Usagef("--subset %q: want all, even or odd", *subset)
	}
	// The projection's lists are checked whether or not --project is given.
	var projBudgetList []int64
	for _, s := range strings.Split(*projBudgets, ",") {
		n, err := cli.ParseSize(s)
		if err != nil || n <= 0 {
			return cli.Usagef("--project-budget: bad size %q (want sizes such as 8GB,32GB)", s)
		}
		projBudgetList = append(projBudgetList, n)
	}
	projBatchList, err := cli.ParseBatchSizes(*projBatches)
	if err != nil {
		return cli.Usagef("--project-batch %q: %v", *projBatches, err)
	}
	projGBpsList, err := parseGBps(*projGBps)
	if err != nil {
		return err
	}
	one := mf
	one.Trunk = "" // --trunk may be a list; Parse checked each directory
	// A projection (--replay with --project) needs no model.
	if err := one.Check(nil); err != nil && !(*replay != "" && mf.Dir == "") {
		return err
	}
	pb, err := cli.ParseSize(*probeBytes)
	if err != nil || (pb > 0 && pb < 1<<20) {
		return cli.Usagef("--probe-size %q: want 0 (no probe) or a size of at least 1MiB", *probeBytes)
	}
	if *drafter != "ngram" && *drafter != "ceiling" {
		return cli.Usagef("--drafter %q: want ngram or ceiling", *drafter)
	}
	comp, ok := map[string]k3.Compression{"on": k3.CompressionOn, "off": k3.CompressionOff, "auto": k3.CompressionAuto}[*compression]
	if !ok {
		return cli.Usagef("--compression %q: want on, off or auto", *compression)
	}
	stopProfile, err := cli.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *replay != "" {
		rr := replayRun{path: *replay, tokenizer: *replayTok, subset: *subset, files: *files, turns: *turns, skipTurns: *skipTurns,
			maxTokens: *turnTokens, maxPrompt: *maxPrompt, project: *projectDir, json: *asJSON}
		var err error
		if rr.spec, err = parseSpecMode(*specKs); err != nil {
			return err
		}
		if mf.Dir == "" && *projectDir == "" {
			return cli.Usagef("--replay needs --model (a replay), --project (a projection), or both")
		}
		rr.budgets, rr.batches, rr.gbps = projBudgetList, projBatchList, projGBpsList
		return benchReplay(&mf, rr, stdout, stderr)
	}
	if *specKs != "" {
		ks, err := cli.ParseBatchSizes(*specKs)
		if err != nil {
			return cli.Usagef("--spec %q: want positive draft lengths, e.g. 1,2,4,8", *specKs)
		}
		if *batchSizes != "" {
			return cli.Usagef("give --spec or --batch, not both")
		}
		return benchSpec(&mf, benchSpecRun{ks: ks, drafter: *drafter, tokens: *tokens, promptLen: *promptLen, seed: *seed, json: *asJSON}, stdout, stderr)
	}
	if *batchSizes != "" {
		bs, err := cli.ParseBatchSizes(*batchSizes)
		if err != nil {
			return err
		}
		if *cold {
			fmt.Fprintln(stderr, "bench: --cold applies before the first batch only")
		}
		return benchBatches(&mf, benchBatchRun{sizes: bs, tokens: *tokens, promptLen: *promptLen, seed: *seed,
			check: *check, maxBatch: *maxBatch, cold: *cold, json: *asJSON}, stdout, stderr)
	}
	if *check || *maxBatch != 0 {
		return cli.Usagef("--check and --max-batch apply to --batch only")
	}
	ctx, cancel := cli.SignalContext()
	defer cancel()
	budget, err := mf.Budget.Bytes()
	if err != nil {
		return err
	}
	// --trunk A,B benches each packed trunk in turn in this process (the
	// device probe once), then compares them: an uncompressed and a
	// compressed pack side by side.
	trunks := []string{mf.Trunk}
	if strings.Contains(mf.Trunk, ",") {
		trunks = strings.Split(mf.Trunk, ",")
	}
	if *rounds < 1 || (*rounds > 1 && len(trunks) < 2) {
		return cli.Usagef("--rounds needs at least 1, and more than 1 only with two or more --trunk directories")
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
