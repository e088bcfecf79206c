package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/cpu"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/engine/planner"
	k3cpu "github.com/k3go/k3/internal/platform/cpu"
	"github.com/k3go/k3/internal/platform/sysinfo"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// doctorReport is what k3 doctor finds; --json prints it as one object.
type doctorReport struct {
	CPU          string   `json:"cpu"`
	Features     []string `json:"cpu_features"`
	KernelPath   string   `json:"kernel_path"`
	DenseKernel  string   `json:"dense_kernel"`
	MXFP4Kernel  string   `json:"mxfp4_kernel"`
	Cores        int      `json:"cores"`
	GOMAXPROCS   int      `json:"gomaxprocs"`
	RAMBytes     int64    `json:"ram_bytes"`
	RAMAvailable int64    `json:"ram_available_bytes"`
	CgroupLimit  int64    `json:"cgroup_limit_bytes,omitempty"`
	// AutoBudget is what --budget auto gives here now (before the floor).
	AutoBudget int64 `json:"auto_budget_bytes,omitempty"`
	// OS is runtime.GOOS; PlatformNote says what is slower on it than on
	// Linux (empty on Linux).
	OS           string `json:"os"`
	PlatformNote string `json:"platform_note,omitempty"`

	Dir            string  `json:"dir"`
	FSType         string  `json:"fs_type"`
	FreeBytes      int64   `json:"free_bytes"`
	ODirect        bool    `json:"odirect"`
	ODirectSeqGBps float64 `json:"odirect_seq_gbps"`
	ODirectRndGBps float64 `json:"odirect_rand_gbps"`
	ProbeNote      string  `json:"probe_note,omitempty"`

	Model      string `json:"model,omitempty"`
	FloorBytes int64  `json:"floor_bytes,omitempty"`
	FullBytes  int64  `json:"full_bytes,omitempty"`
	// The advice: RecommendedFlag is "--preset max" when everything fits
	// resident, else "--budget auto" (RecommendedBudget is what it gives
	// here now); RecommendedPreset is "max" or empty; LargestPreset the
	// largest preset with a budget that fits this machine and the model's
	// floor ("" if none does).
	RecommendedBudget int64   `json:"recommended_budget_bytes,omitempty"`
	RecommendedFlag   string  `json:"recommended_flag,omitempty"`
	RecommendedPreset string  `json:"recommended_preset,omitempty"`
	LargestPreset     string  `json:"largest_preset,omitempty"`
	TrunkStreams      bool    `json:"trunk_streams,omitempty"`
	BytesPerToken     int64   `json:"bytes_per_token,omitempty"`
	ExpectedSPerToken float64 `json:"expected_s_per_token,omitempty"`
	SessionsAtBudget  int     `json:"sessions_at_budget,omitempty"`
	// Plans is the memory plan at each preset budget from the floor up.
	Plans []doctorPlan `json:"plans,omitempty"`
	// Compression is what k3 pack --compress would give here: the ratio
	// on a sample of the checkpoint, the decode rates, the verdict against
	// this disk.
	Compression *k3.CompressionReport `json:"compression,omitempty"`
	CanRun      bool                  `json:"can_run"`
	Problems    []string              `json:"problems,omitempty"`
}

func runDoctor(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("doctor", "[--dir DIR] [--model CHECKPOINT] [--json]", stderr)
	dir := fs.String("dir", ".", "`directory` on the disk to measure (a temporary file is written and removed)")
	modelDir := fs.String("model", "", "checkpoint `directory` to plan for (its disk is measured unless --dir is given)")
	probeSize := fs.String("probe-size", "1GiB", "`size` of the temporary file the disk probe reads")
	asJSON := fs.Bool("json", false, "print one JSON object")
	var pf cli.ProgressFlag
	pf.Register(fs)
	cli.InputDirs(fs, "dir", "model")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	mode, err := pf.Mode()
	if err != nil {
		return err
	}
	size, err := cli.ParseSize(*probeSize)
	if err != nil || size < 1<<20 {
		return cli.Usagef("--probe-size %q: want a size of at least 1MiB", *probeSize)
	}
	dirSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "dir" {
			dirSet = true
		}
	})
	if *modelDir != "" && !dirSet {
		*dir = *modelDir
	}
	// A directory that is not there is a typo, not a finding about the
	// machine: Parse said so (--dir and --model are input directories).
	ctx, cancel := cli.SignalContext()
	defer cancel()

	r := &doctorReport{CPU: cpuName(), Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Dir: *dir}
	r.Features = cpuFeatures()
	r.DenseKernel, r.MXFP4Kernel = tensor.Implementation(), quant.Implementation()
	r.KernelPath = r.MXFP4Kernel
	r.OS, r.PlatformNote = runtime.GOOS, platformNote(runtime.GOOS)
	if mi, err := sysinfo.MemoryInfo(); err == nil {
		r.RAMBytes, r.RAMAvailable, r.CgroupLimit = mi.Limit(), mi.Headroom(), mi.CgroupLimit
		r.AutoBudget = cli.AutoBudget(mi)
	} else {
		r.Problems = append(r.Problems, fmt.Sprintf("memory: %v (give --budget a size; auto needs it)", err))
	}
	if ds, err := sysinfo.FreeSpace(*dir); err == nil {
		r.FreeBytes, r.FSType = ds.Free, ds.FSType
	} else {
		r.Problems = append(r.Problems, fmt.Sprintf("disk: %v", err))
	}
	// What it reads, while it reads it.
	steps := cli.NewSteps(stderr, mode)
	defer steps.Done()
	steps.Step("measuring the disk under %s: reading a %s file with O_DIRECT", *dir, human(size))
	probe, err := iox.ProbeBandwidth(ctx, *dir, iox.ProbeOptions{FileSize: size, QueueDepths: []int{8}})
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("disk probe: %v", err))
	} else {
		r.ODirect, r.ProbeNote = probe.Direct, probe.Note
		for _, run := range probe.Runs {
			r.ODirectSeqGBps = max(r.ODirectSeqGBps, run.Sequential.GBps())
			r.ODirectRndGBps = max(r.ODirectRndGBps, run.Random.GBps())
		}
	}
	r.CanRun = true
	if *modelDir != "" {
		r.Model = *modelDir
		steps.Step("reading %s", cli.CheckpointFiles(*modelDir))
		if err := planFor(r, *modelDir); err != nil {
			r.CanRun = false
			r.Problems = append(r.Problems, err.Error())
		}
		if r.RecommendedBudget > 0 && !r.TrunkStreams {
			// The whole trunk is resident at the advised budget: a
			// compressed pack would change nothing.
		} else {
			steps.Step("reading a sample of %s's dense weights to measure their compression", *modelDir)
			if cr, err := k3.MeasureCompression(ctx, *modelDir); err == nil {
				if disk := max(r.ODirectSeqGBps, r.ODirectRndGBps); disk > 0 {
					cr = cr.Judge(disk * 1e9) // the probe's figure is better than the sample's short read
				}
				r.Compression = &cr
			} else {
				r.Problems = append(r.Problems, fmt.Sprintf("compression sample: %v", err))
			}
		}
	}
	steps.Done()
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(r); err != nil {
			return err
		}
	} else {
		printDoctor(stdout, r)
	}
	if !r.CanRun {
		return fmt.Errorf("this machine cannot run %s: %s", *modelDir, strings.Join(r.Problems, "; "))
	}
	return nil
}

// doctorPlan is the memory plan at one preset budget.
type doctorPlan struct {
	Preset        string `json:"preset"`
	Budget        int64  `json:"budget_bytes"`
	Fits          bool   `json:"fits"`
	PinnedParts   int    `json:"pinned_parts"`
	Parts         int    `json:"parts"`
	RingSlots     int    `json:"ring_slots"`
	RingSlotBytes int64  `json:"ring_slot_bytes"`
	CacheSlots    int    `json:"cache_slots"`
	TrunkPerPass  int64  `json:"trunk_bytes_per_pass"`
	BytesPerToken int64  `json:"bytes_per_token"`
	HeapLimit     int64  `json:"go_memory_limit_bytes"`
	Planned       int64  `json:"planned_bytes"`
}

// presetPlans plans the checkpoint at every preset with a budget.
func presetPlans(in *k3.Inspection) []doctorPlan {
	var out []doctorPlan
	for _, p := range cli.Presets() {
		if p.Bytes == 0 {
			continue
		}
		dp := doctorPlan{Preset: p.Name, Budget: p.Bytes}
		if mp, err := in.Plan(p.Bytes); err == nil {
			dp.Fits, dp.Parts, dp.PinnedParts = true, mp.PinnedParts+mp.StreamedParts, mp.PinnedParts
			dp.RingSlots, dp.RingSlotBytes, dp.CacheSlots = mp.RingSlots, mp.RingSlotBytes, mp.CacheSlots
			dp.TrunkPerPass, dp.HeapLimit, dp.Planned = mp.TrunkBytesPerPass, mp.HeapLimitBytes, mp.TotalBytes
			dp.BytesPerToken, _ = in.BytesPerToken(p.Bytes)
		}
		out = append(out, dp)
	}
	return out
}

// planFor fills the checkpoint part of the report: the floor, a budget
// that fits the machine, and the expected speed from the roofline.
func planFor(r *doctorReport, dir string) error {
	in, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		return err
	}
	r.FloorBytes, r.FullBytes = in.FloorBytes, in.FullBytes
	r.Plans = presetPlans(in)
	avail := r.RAMAvailable
	if avail == 0 {
		avail = r.RAMBytes
	}
	// Leave a tenth of the available memory to the rest of the system, as
	// --budget auto does.
	usable := cli.AutoBudget(sysinfo.MemInfo{Total: avail})
	if usable < in.FloorBytes {
		return fmt.Errorf("the model needs at least %s of RAM for its floor; %s is available", human(in.FloorBytes), human(avail))
	}
	// Everything resident if it fits; else the most this machine gives
	// (--budget auto), which is between two presets or above them all.
	budget := min(usable, in.FullBytes)
	r.RecommendedBudget, r.RecommendedFlag = budget, "--budget auto"
	if in.FullBytes <= usable {
		r.RecommendedFlag, r.RecommendedPreset = "--preset max", "max"
	}
	for _, p := range cli.Presets() {
		if p.Bytes > 0 && p.Bytes <= usable && p.Bytes >= in.FloorBytes {
			r.LargestPreset = p.Name
		}
	}
	if mp, err := in.Plan(budget); err == nil {
		r.TrunkStreams = mp.StreamedParts > 0
	}
	bpt, err := in.BytesPerToken(budget)
	if err != nil {
		return err
	}
	r.BytesPerToken = bpt
	// Batching: how many sessions share a pass at this budget (one row
	// each), at the default context.
	r.SessionsAtBudget = in.SessionsFit(budget, 64)
	if bw := max(r.ODirectSeqGBps, r.ODirectRndGBps); bw > 0 {
		r.ExpectedSPerToken = float64(bpt) / (bw * 1e9)
	}
	return nil
}

func printDoctor(w io.Writer, r *doctorReport) {
	fmt.Fprintf(w, "CPU:      %s, %d cores (GOMAXPROCS %d)\n", r.CPU, r.Cores, r.GOMAXPROCS)
	fmt.Fprintf(w, "features: %s\n", strings.Join(r.Features, " "))
	fmt.Fprintf(w, "kernels:  dense %s, MXFP4 %s\n", r.DenseKernel, r.MXFP4Kernel)
	lim := ""
	if r.CgroupLimit > 0 {
		lim = fmt.Sprintf(" (cgroup limit %s)", human(r.CgroupLimit))
	}
	fmt.Fprintf(w, "RAM:      %s, %s available%s; --budget auto: %s\n", human(r.RAMBytes), human(r.RAMAvailable), lim, human(r.AutoBudget))
	direct := uncachedName(r.OS)
	if !r.ODirect {
		direct = "buffered (" + direct + " refused; may include the page cache)"
		if r.OS != "linux" && r.OS != "darwin" {
			direct = "buffered (may include the page cache)"
		}
	}
	fmt.Fprintf(w, "disk:     %s (%s), %s free; %s sequential %.2f GB/s, random 17.5 MB reads %.2f GB/s\n",
		r.Dir, r.FSType, human(r.FreeBytes), direct, r.ODirectSeqGBps, r.ODirectRndGBps)
	if r.ProbeNote != "" {
		fmt.Fprintf(w, "          %s\n", r.ProbeNote)
	}
	if r.PlatformNote != "" {
		fmt.Fprintf(w, "platform: %s\n", r.PlatformNote)
	}
	if r.Model != "" && r.FloorBytes > 0 {
		fmt.Fprintf(w, "model:    %s: floor %s (the peak RSS of a k3 process at that budget stays within it), everything resident %s\n", r.Model, human(r.FloorBytes), human(r.FullBytes))
		for _, p := range r.Plans {
			if !p.Fits {
				fmt.Fprintf(w, "plan:     %-11s %9s: below the floor\n", p.Preset, human(p.Budget))
				continue
			}
			fmt.Fprintf(w, "plan:     %-11s %9s: trunk %d of %d parts pinned, ring %d × %s, %d expert slots; %s of trunk and about %s in all read per token; Go memory limit %s\n",
				p.Preset, human(p.Budget), p.PinnedParts, p.Parts, p.RingSlots, human(p.RingSlotBytes), p.CacheSlots, human(p.TrunkPerPass), human(p.BytesPerToken), human(p.HeapLimit))
		}
		if r.RecommendedBudget > 0 {
			fmt.Fprintf(w, "advice:   %s: %s\n", r.RecommendedFlag, adviceText(r))
			fmt.Fprintf(w, "batching: that budget holds at most %d sessions of 4096 positions (--max-context 4096; every one takes room from the pinned trunk and the expert cache; without --max-context, run, serve and batch give each session the longest context the budget holds); passes carry up to 64 rows (--sessions, --max-batch)\n", r.SessionsAtBudget)
		}
	}
	switch {
	case r.Compression != nil && r.Compression.Pays:
		fmt.Fprintf(w, "compress: %s: k3 pack --compress writes such a trunk\n", r.Compression)
	case r.Compression != nil:
		fmt.Fprintf(w, "compress: %s\n", r.Compression)
	case r.RecommendedBudget > 0 && !r.TrunkStreams:
		fmt.Fprintf(w, "compress: not needed: at the advised budget the whole trunk is resident (a compressed pack, k3 pack --compress, only speeds up a streamed trunk)\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem:  %s\n", p)
	}
}

func human(n int64) string { return planner.Human(n) }

// adviceText explains the advised budget: everything resident, or what
// --budget auto gives here now set against the presets, then what a token
// costs there.
func adviceText(r *doctorReport) string {
	bw := max(r.ODirectSeqGBps, r.ODirectRndGBps)
	if r.RecommendedPreset == "max" {
		return fmt.Sprintf("everything resident (%s), nothing read per token once loaded", human(r.RecommendedBudget))
	}
	where := "below the smallest preset (laptop)"
	for _, p := range cli.Presets() {
		if p.Name == r.LargestPreset {
			where = fmt.Sprintf("the largest preset that fits is %s, %s", p.Name, human(p.Bytes))
		}
	}
	return fmt.Sprintf("%s on this machine now (%s): about %s read per token, roofline %.3f s/token at %.2f GB/s",
		human(r.RecommendedBudget), where, human(r.BytesPerToken), r.ExpectedSPerToken, bw)
}

// uncachedName names how checkpoint reads bypass the page cache on goos.
func uncachedName(goos string) string {
	if goos == "darwin" {
		return "F_NOCACHE"
	}
	return "O_DIRECT"
}

// platformNote says what is slower on goos than on Linux, where reads
// bypass the page cache with O_DIRECT and memory and cgroup limits come
// from /proc and /sys; "" for Linux.
func platformNote(goos string) string {
	switch goos {
	case "linux":
		return ""
	case "darwin":
		return "macOS: checkpoint reads bypass the page cache with F_NOCACHE (read-ahead off) instead of O_DIRECT, " +
			"split below 2 GiB per call; memory from sysctl (free, purgeable and file-backed pages count as available)"
	case "windows":
		return "Windows: checkpoint reads are buffered (no O_DIRECT or F_NOCACHE path): the page cache also holds the weights " +
			"the expert cache holds, so the machine needs memory beyond the budget and the disk probe may measure the cache; " +
			"memory from GlobalMemoryStatusEx, no job-object limit is read"
	case "freebsd":
		return "FreeBSD: checkpoint reads are buffered (no O_DIRECT path yet): the page cache also holds the weights " +
			"the expert cache holds, and the disk probe may measure the cache; memory from sysctl, no rctl limit is read"
	}
	return goos + ": checkpoint reads are buffered (no O_DIRECT path) and the page cache also holds the weights; " +
		"this system's memory and storage are not read: give --budget a size"
}

func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.Index(line, ":"); i >= 0 {
					return strings.TrimSpace(line[i+1:])
				}
			}
		}
	}
	if name := sysctlCPUName(); name != "" {
		return name
	}
	return runtime.GOARCH
}

func cpuFeatures() []string {
	var f []string
	add := func(name string, ok bool) {
		if ok {
			f = append(f, name)
		}
	}
	switch runtime.GOARCH {
	case "amd64":
		add("avx2", cpu.X86.HasAVX2)
		add("fma", cpu.X86.HasFMA)
		add("avx512f", cpu.X86.HasAVX512F)
		add("avx512bw", cpu.X86.HasAVX512BW)
		add("avx512vl", cpu.X86.HasAVX512VL)
		add("avx512vnni", cpu.X86.HasAVX512VNNI)
		add("avx512bf16", cpu.X86.HasAVX512BF16)
	case "arm64":
		// From klauspost/cpuid (the NEON kernels' dispatch), which also
		// sees BF16; x/sys/cpu does not.
		a := k3cpu.ARM64
		add("asimd", a.ASIMD)
		add("asimddp", a.ASIMDDP)
		add("bf16", a.BF16)
		add("sve", a.SVE)
	}
	if len(f) == 0 {
		f = []string{"(none of interest)"}
	}
	return f
}
