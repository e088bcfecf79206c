package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/k3go/k3/internal/synth"
)

const synthUsage = `--out DIR --profile tiny|medium|custom [flags]

Writes a synthetic Kimi K3 checkpoint in the released format: nested
config.json, sharded safetensors with an index, BF16 trunk, MXFP4 routed
experts (one contiguous run each), random weights scaled to keep activations
finite and routing spread, deterministic from the seed. DIR must not exist
or be empty; nothing is ever overwritten, and a failed or interrupted run
removes what it wrote.

Profiles: tiny (oracle-sized, ~4 MB), medium (real K3 widths, 4 layers,
64 experts, 32,768 vocabulary, ~10 GB, 17,547,264 bytes per expert),
custom (--base, default tiny, changed by the flags below; the same flags
also change tiny or medium directly).`

func runSynth(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synth", synthUsage, stderr)
	out := fs.String("out", "", "output `directory` (must not exist or be empty)")
	profile := fs.String("profile", "", "`name`: tiny, medium or custom")
	base := fs.String("base", "tiny", "`profile` that custom starts from: tiny or medium")
	layers := fs.Int("layers", 0, "number of layers `N` (MLA every 4th and the last)")
	experts := fs.Int("experts", 0, "routed experts per layer")
	topk := fs.Int("topk", 0, "experts per token `K`")
	vocab := fs.Int("vocab", 0, "vocabulary size `V`")
	hidden := fs.Int("hidden", 0, "hidden size")
	latent := fs.Int("latent", 0, "routed expert latent width (multiple of 32)")
	moeInter := fs.Int("moe-intermediate", 0, "routed expert width (multiple of 32)")
	denseInter := fs.Int("dense-intermediate", 0, "dense FFN width of layer 0")
	seed := fs.Uint64("seed", synth.DefaultSeed, "weights `seed`")
	shardSize := fs.String("shard-size", "4GiB", "target shard `size` (e.g. 2GiB, 512MB, bytes)")
	tokenizer := fs.String("tokenizer", "", "copy tiktoken.model and tokenizer_config.json from `DIR`")
	dryRun := fs.Bool("dry-run", false, "print the plan without writing")
	buffered := fs.Bool("buffered", false, "write through the page cache instead of O_DIRECT")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *profile == "" {
		return usagef("--profile is required (tiny, medium or custom)")
	}
	if *out == "" && !*dryRun {
		return usagef("--out is required")
	}
	name := *profile
	if name == "custom" {
		name = *base
	} else if synthFlagSet(fs, "base") {
		return usagef("--base applies to --profile custom only")
	}
	p, err := synth.ByName(name)
	if err != nil {
		return usagef("%v", err)
	}
	overrides := false
	for _, o := range []struct {
		flag string
		v    int
		set  func(int)
	}{
		{"layers", *layers, p.SetLayers},
		{"experts", *experts, func(n int) { p.Config.Experts = n }},
		{"topk", *topk, func(n int) { p.Config.TopK = n }},
		{"vocab", *vocab, func(n int) { p.Config.Vocab = n }},
		{"hidden", *hidden, func(n int) { p.Config.Hidden = n }},
		{"latent", *latent, func(n int) { p.Config.LatentDim = n }},
		{"moe-intermediate", *moeInter, func(n int) { p.Config.MoEIntermediate = n }},
		{"dense-intermediate", *denseInter, func(n int) { p.Config.DenseIntermediate = n }},
	} {
		if !synthFlagSet(fs, o.flag) {
			continue
		}
		if o.v <= 0 {
			return usagef("--%s must be positive", o.flag)
		}
		o.set(o.v)
		overrides = true
	}
	p.Seed = *seed
	if overrides || *profile == "custom" {
		p.Name = "custom"
	}
	if err := p.Validate(); err != nil {
		return usagef("%s", strings.TrimPrefix(err.Error(), "synth: "))
	}
	size, err := synthParseSize(*shardSize)
	if err != nil {
		return err
	}

	if *dryRun {
		L, err := synth.PlanLayout(p, size)
		if err != nil {
			return usagef("%s", strings.TrimPrefix(err.Error(), "synth: "))
		}
		fmt.Fprintf(stdout, "profile %s (seed %d): %d layers, %d experts/layer (top %d), vocab %d, hidden %d\n",
			p.Name, p.Seed, p.Config.Layers, p.Config.Experts, p.Config.TopK, p.Config.Vocab, p.Config.Hidden)
		fmt.Fprintf(stdout, "%d tensors in %d shards, %d bytes (%s), %d bytes per expert\n",
			L.Tensors, len(L.Shards), L.FileBytes, synth.FormatBytes(L.FileBytes), L.ExpertBytes)
		for _, sh := range L.Shards {
			fmt.Fprintf(stdout, "\t%s\t%d tensors\t%d bytes\n", sh.Name, len(sh.Tensors), sh.Size)
		}
		return nil
	}

	ctx, cancel := signalContext()
	defer cancel()
	opts := synth.WriteOptions{ShardSize: size, TokenizerDir: *tokenizer, Buffered: *buffered}
	var bar *synthBar
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			bar = &synthBar{w: stderr, start: time.Now()}
			opts.Progress = bar.update
		}
	}
	sum, err := synth.Write(ctx, *out, p, opts)
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return synthError{err}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(sum)
	}
	mode := "O_DIRECT"
	if !sum.Direct {
		mode = "buffered"
	}
	fmt.Fprintf(stdout, "wrote %s: profile %s, seed %d, %d layers × %d experts, %d tensors in %d shards, %d bytes (%s), %d bytes/expert, %.1f s, %.0f MB/s (%s)\n",
		sum.Dir, sum.Profile, sum.Seed, sum.Layers, sum.Experts, sum.Tensors, sum.Shards, sum.Bytes, synth.FormatBytes(sum.Bytes),
		sum.ExpertBytes, sum.ElapsedS, sum.MBps, mode)
	return nil
}

// synthError drops the package prefix of the library's errors (the command
// prints its own) and keeps the chain for the exit code.
type synthError struct{ err error }

func (e synthError) Error() string {
	if errors.Is(e.err, context.Canceled) {
		return "interrupted; the partial checkpoint was removed"
	}
	return strings.TrimPrefix(e.err.Error(), "synth: ")
}
func (e synthError) Unwrap() error { return e.err }

// synthFlagSet reports whether the flag was given on the command line.
func synthFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// synthParseSize reads a byte count: a number with an optional unit B, KB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func synthParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult := map[string]float64{"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || v <= 0 || math.IsInf(v*mult, 0) || v*mult > 1<<60 {
		return 0, usagef("bad size %q (examples: 4GiB, 512MB, 1048576)", s)
	}
	return int64(v * mult), nil
}

// synthBar draws a progress bar on a terminal, at most ten times a second.
type synthBar struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
	last  time.Time
	drawn bool
}

func (b *synthBar) update(done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && done < total {
		return
	}
	b.last, b.drawn = now, true
	frac := float64(done) / float64(max(total, 1))
	const width = 30
	n := int(frac * width)
	el := now.Sub(b.start).Seconds()
	rate := float64(done) / max(el, 1e-9)
	eta := "--"
	if rate > 0 && done > 0 {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "\r[%s%s] %5.1f%%  %s / %s  %.0f MB/s  ETA %s   ",
		strings.Repeat("#", n), strings.Repeat(".", width-n), 100*frac,
		synth.FormatBytes(done), synth.FormatBytes(total), rate/1e6, eta)
}

func (b *synthBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}
