package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/platform/sysinfo"
	"github.com/k3go/k3/tokenizer"
)

// ModelFlags are the flags every subcommand that loads a model shares:
// --model, --threads, --max-context, --trunk, --prefill-chunk, the budget's
// and the prefix cache's.
type ModelFlags struct {
	Dir          string // --model: the checkpoint directory
	Threads      int    // --threads: kernel threads, 0 for GOMAXPROCS
	MaxContext   int    // --max-context: positions per session, 0 for the library's default
	Trunk        string // --trunk: a packed trunk directory, or "" to read the shards
	PrefillChunk int    // --prefill-chunk: most prompt tokens of a session per pass, 0 for the planner's rows
	Budget       BudgetFlags
	Prefix       PrefixFlags
	Cluster      ClusterFlags
	Progress     ProgressFlag // --progress: how the command shows its work
	// PrefixByDefault, set before Register, turns the prefix cache on
	// unless --no-prefix-cache (k3 serve, k3 batch); otherwise it is off
	// unless --prefix-cache.
	PrefixByDefault bool
	// AutoContext, set before Register, makes --max-context default to
	// the largest context the budget holds for the command's sessions
	// (k3.Options.AutoContext; k3 run, serve, batch): conversations and
	// agents need long contexts. Otherwise it defaults to 4096.
	AutoContext bool

	fs *flag.FlagSet // where the flags are defined, to name them in errors
}

// Register defines the flags on fs (made by NewFlags): --model and --trunk
// must name directories that exist.
func (m *ModelFlags) Register(fs *flag.FlagSet) {
	m.fs = fs
	m.Budget.Register(fs)
	m.Cluster.RegisterPeers(fs)
	m.Prefix.register(fs, m.PrefixByDefault)
	m.Progress.Register(fs)
	fs.StringVar(&m.Trunk, "trunk", "", "packed trunk `directory` written by k3 pack (default: read the trunk from the shards)")
	fs.StringVar(&m.Dir, "model", "", "checkpoint `directory` (config.json and *.safetensors)")
	fs.IntVar(&m.Threads, "threads", 0, "kernel threads (0 = GOMAXPROCS)")
	ctx := "positions per session (0 = 4096, or the model's max_position_embeddings if less)"
	if m.AutoContext {
		ctx = "positions per session (0 = the largest the budget holds for the sessions, at most the model's max_position_embeddings; printed at start)"
	}
	fs.IntVar(&m.MaxContext, "max-context", 0, ctx)
	fs.IntVar(&m.PrefillChunk, "prefill-chunk", 0, "most prompt `tokens` of one session per pass over the weights (0 = as many as the pass holds: the planner sizes passes to the budget)")
	InputDirs(fs, "model", "trunk")
}

// Flags is the flag set Register defined the flags on (nil before).
func (m *ModelFlags) Flags() *flag.FlagSet { return m.fs }

// PrefixFlags are the prefix cache's flags.
type PrefixFlags struct {
	on, off     bool
	byDefault   bool
	RAM, Disk   string // sizes; "" for the library's defaults
	Dir         string
	BlockTokens int
}

func (p *PrefixFlags) register(fs *flag.FlagSet, byDefault bool) {
	p.byDefault = byDefault
	if byDefault {
		fs.BoolVar(&p.off, "no-prefix-cache", false, "turn the prefix cache off (it is on: a prompt that shares a prefix with an earlier one is prefilled only from where they differ)")
	} else {
		fs.BoolVar(&p.on, "prefix-cache", false, "turn the prefix cache on: a prompt that shares a prefix with an earlier one (in this run or an earlier one) is prefilled only from where they differ")
	}
	fs.StringVar(&p.RAM, "prefix-cache-ram", "", "the prefix cache's RAM `size`, inside the budget (default: an eighth of the budget above its floor; 0 = none)")
	fs.StringVar(&p.Disk, "prefix-cache-disk", "", "the prefix cache's disk `size` (default 32GiB; 0 = none)")
	fs.StringVar(&p.Dir, "prefix-cache-dir", "", "the prefix cache's `directory` (default: k3/prefix in the user's cache directory)")
	fs.IntVar(&p.BlockTokens, "prefix-cache-block", 0, "the prefix cache's block of `tokens` (default 256)")
}

// RegisterWorker defines a worker's prefix-cache flags on fs: where it
// keeps its slices of rank 0's entries (on unless --no-prefix-cache; the
// block is rank 0's).
func (p *PrefixFlags) RegisterWorker(fs *flag.FlagSet) {
	p.byDefault = true
	fs.BoolVar(&p.off, "no-prefix-cache", false, "keep no slices of rank 0's prefix-cache entries (rank 0 then prefills what it would restore)")
	fs.StringVar(&p.RAM, "prefix-cache-ram", "", "the RAM `size` of this rank's slices of rank 0's prefix-cache entries, inside the budget (default: two per session; 0 = none)")
	fs.StringVar(&p.Disk, "prefix-cache-disk", "", "the disk `size` of this rank's slices of rank 0's prefix-cache entries (default 32GiB; 0 = none)")
	fs.StringVar(&p.Dir, "prefix-cache-dir", "", "the `directory` of this rank's slices of rank 0's prefix-cache entries (default: k3/prefix in the user's cache directory)")
}

// WorkerOptions returns a worker's prefix-cache options (RegisterWorker):
// none at all with --no-prefix-cache.
func (p *PrefixFlags) WorkerOptions() (*k3.PrefixCacheOptions, error) {
	o, err := p.Settings()
	if err != nil {
		return nil, err
	}
	if p.off {
		return &k3.PrefixCacheOptions{RAMBytes: -1, DiskBytes: -1}, nil
	}
	return o, nil
}

// Options returns the prefix cache's options, nil when it is off (its
// flags are checked either way).
func (p *PrefixFlags) Options() (*k3.PrefixCacheOptions, error) {
	o, err := p.Settings()
	if err != nil || p.off || !(p.on || p.byDefault) {
		return nil, err
	}
	return o, nil
}

// Settings returns the prefix cache's options from the size, directory
// and block flags, whether the cache is on or off (for a command that
// runs both ways, as k3 bench-serve --agent does).
func (p *PrefixFlags) Settings() (*k3.PrefixCacheOptions, error) {
	o := &k3.PrefixCacheOptions{Dir: p.Dir, BlockTokens: p.BlockTokens}
	for _, f := range []struct {
		name, v string
		dst     *int64
	}{{"--prefix-cache-ram", p.RAM, &o.RAMBytes}, {"--prefix-cache-disk", p.Disk, &o.DiskBytes}} {
		if f.v == "" {
			continue
		}
		n, err := ParseSize(f.v)
		if err != nil {
			return nil, Usagef("%s %q: %v", f.name, f.v, err)
		}
		*f.dst = n
		if n == 0 {
			*f.dst = -1 // none
		}
	}
	if err := NotNegative("prefix-cache-block", p.BlockTokens, "256"); err != nil {
		return nil, err
	}
	return o, nil
}

// Open opens the model with the flags' options.
func (m *ModelFlags) Open(ctx context.Context) (*k3.Model, error) {
	return m.OpenWith(ctx, nil)
}

// OpenWith opens the model with the flags' options, changed by edit when
// it is not nil (sessions, rows per pass). Without --model it is a usage
// error; an option the library refuses is told with its flag.
func (m *ModelFlags) OpenWith(ctx context.Context, edit func(*k3.Options)) (*k3.Model, error) {
	if m.Dir == "" {
		return nil, Usagef("--model is required")
	}
	opts, err := m.Options()
	if err != nil {
		return nil, err
	}
	if edit != nil {
		edit(&opts)
		if err := opts.Validate(); err != nil {
			return nil, ForFlags(err, m.fs)
		}
	}
	opts.RAMBudget = m.Budget.AtLeastFloor(m.Dir, opts)
	mo, err := k3.OpenContext(ctx, m.Dir, opts)
	return mo, ForFlags(err, m.fs)
}

// Options returns the library options the flags give (the budget, the
// threads, the context, the trunk, the prefill chunk, the prefix cache),
// checked as the library checks them (k3.Options.Validate) before anything
// is read: a bad value is a usage error naming its flag.
func (m *ModelFlags) Options() (k3.Options, error) {
	budget, err := m.Budget.Bytes()
	if err != nil {
		return k3.Options{}, err
	}
	if _, err := m.Progress.Mode(); err != nil {
		return k3.Options{}, err
	}
	prefix, err := m.Prefix.Options()
	if err != nil {
		return k3.Options{}, err
	}
	cluster, err := m.Cluster.Options()
	if err != nil {
		return k3.Options{}, err
	}
	opts := k3.Options{Threads: m.Threads, MaxContext: m.MaxContext, RAMBudget: budget, TrunkDir: m.Trunk,
		PrefillChunk: m.PrefillChunk, PrefixCache: prefix, Cluster: cluster, AutoContext: m.AutoContext && m.MaxContext == 0}
	if err := opts.Validate(); err != nil {
		return k3.Options{}, ForFlags(err, m.fs)
	}
	return opts, nil
}

// Check validates the flags without opening anything, as OpenWith with
// the same edit would: --model given, and the options as the library
// checks them (k3.Options.Validate), bad ones told with their flags. A
// command that does something before it opens the model (listen, probe)
// checks first.
func (m *ModelFlags) Check(edit func(*k3.Options)) error {
	if m.Dir == "" {
		return Usagef("--model is required")
	}
	opts, err := m.Options()
	if err != nil {
		return err
	}
	if edit != nil {
		edit(&opts)
		return ForFlags(opts.Validate(), m.fs)
	}
	return nil
}

// CheckCheckpoint refuses a --model directory without config.json (as
// the library would, ErrBadConfig), before a command does anything else.
func CheckCheckpoint(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, fs.ErrNotExist) {
		return Tagged(k3.ErrBadConfig, "--model %s: no config.json in it: not a checkpoint directory (config.json and *.safetensors)", dir)
	}
	return nil
}

// ContextNote says how long each session's context is, for the start of a
// command: chosen by the budget (--max-context not given), or given.
func ContextNote(m *k3.Model, given, sessions int) string {
	n := m.MaxContext()
	if given > 0 {
		return fmt.Sprintf("context %d positions per session (--max-context)", n)
	}
	budget := "the machine's memory (no --budget)"
	if b := m.Stats().BudgetBytes; b > 0 {
		budget = "the " + planner.Human(b) + " budget"
	}
	limit, from := m.Config().MaxPositions, "max_position_embeddings"
	if limit == 0 {
		limit, from = engine.DefaultContextLimit, "k3's limit: config.json gives no max_position_embeddings"
	}
	if n >= limit {
		return fmt.Sprintf("context %d positions per session: the model's limit (%s), which %s holds for %d session(s) (--max-context sets it)", n, from, budget, max(sessions, 1))
	}
	return fmt.Sprintf("context %d positions per session: the most %s holds for %d session(s) (--max-context sets it)", n, budget, max(sessions, 1))
}

// CheckTokenizer refuses, before any weight is read, a command that needs
// a tokenizer (text in or out) without one: tokDir (--tokenizer) or else
// the checkpoint directory dir must hold tiktoken.model.
func CheckTokenizer(dir, tokDir string) error {
	if tokDir != "" {
		if _, err := os.Stat(filepath.Join(tokDir, tokenizer.ModelFile)); err != nil {
			return Usagef("--tokenizer %s: no %s in it", tokDir, tokenizer.ModelFile)
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, tokenizer.ModelFile)); err != nil {
		return Usagef("--model %s has no tokenizer (%s and %s); give --tokenizer DIR", dir, tokenizer.ModelFile, tokenizer.ConfigFile)
	}
	return nil
}

// A Preset is a named RAM budget (--preset).
type Preset struct {
	Name  string
	Bytes int64 // 0: no limit, everything resident
	Note  string
}

// presets are the named budgets, smallest first; "max" keeps everything
// resident.
var presets = []Preset{
	{"laptop", 8e9, "8 GB: the floor plus a streaming trunk"},
	{"desktop", 32e9, "32 GB"},
	{"workstation", 64e9, "64 GB"},
	{"server", 128e9, "128 GB: most of the trunk pinned"},
	{"max", 0, "everything resident (no limit)"},
}

// Presets returns the named budgets, smallest first, "max" (no limit)
// last.
func Presets() []Preset { return slices.Clone(presets) }

// BudgetFlags are --budget and --preset.
type BudgetFlags struct {
	Budget string // --budget: a size, e.g. 8GB, or "auto"
	Preset string // --preset: a preset's name
}

// AutoBudgetReserve is the share of the available memory that --budget
// auto leaves to the rest of the system: a tenth. k3 doctor advises the
// same budget.
const AutoBudgetReserve = 10

// memoryInfo reads the machine's memory; tests replace it.
var memoryInfo = sysinfo.MemoryInfo

// AutoBudget is the budget --budget auto gives on a machine with mi: the
// memory available now (MemAvailable, or the room left under a cgroup
// limit, on Linux; free and reclaimable pages on macOS and FreeBSD;
// available physical memory on Windows; the total where that is unknown)
// minus a tenth (AutoBudgetReserve) for the rest of the system. 0 if the
// memory is unknown.
func AutoBudget(mi sysinfo.MemInfo) int64 {
	avail := mi.Headroom()
	if avail <= 0 {
		avail = mi.Limit()
	}
	return max(avail-avail/AutoBudgetReserve, 0)
}

// Auto reports whether the budget is --budget auto.
func (b *BudgetFlags) Auto() bool { return strings.EqualFold(strings.TrimSpace(b.Budget), "auto") }

// AtLeastFloor returns opts.RAMBudget raised to the floor of the
// checkpoint in dir when the budget is --budget auto and the available
// memory is below the floor: the smallest budget the model runs in is
// then the best guess (the machine may page). With a given size, a preset,
// no dir, or a checkpoint that cannot be inspected (opening it will say
// why) it returns opts.RAMBudget unchanged.
func (b *BudgetFlags) AtLeastFloor(dir string, opts k3.Options) int64 {
	if !b.Auto() || dir == "" || opts.RAMBudget <= 0 {
		return opts.RAMBudget
	}
	in, err := k3.Inspect(dir, opts)
	if err != nil {
		return opts.RAMBudget
	}
	return max(opts.RAMBudget, in.FloorBytes)
}

// Register defines the flags on fs.
func (b *BudgetFlags) Register(fs *flag.FlagSet) {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	fs.StringVar(&b.Budget, "budget", "", "hard RAM `limit` for the engine, e.g. 8GB or 12GiB, or auto: the memory available now minus a tenth, at least the model's floor (default: no limit)")
	fs.StringVar(&b.Preset, "preset", "", "named budget: "+strings.Join(names, ", "))
}

// Bytes is the budget the flags give: 0 for no limit (neither flag, or
// --preset max); for --budget auto, [AutoBudget] of this machine (see
// [BudgetFlags.AtLeastFloor] for the floor). Both flags at once, an
// unknown preset, a bad size, a zero --budget and auto on a machine whose
// memory cannot be read are usage errors.
func (b *BudgetFlags) Bytes() (int64, error) {
	if b.Budget != "" && b.Preset != "" {
		return 0, Usagef("give --budget or --preset, not both")
	}
	if b.Preset != "" {
		for _, p := range presets {
			if p.Name == b.Preset {
				return p.Bytes, nil
			}
		}
		names := make([]string, len(presets))
		for i, p := range presets {
			names[i] = p.Name
		}
		return 0, Usagef("--preset %q: unknown (want %s)", b.Preset, strings.Join(names, ", "))
	}
	if b.Budget == "" {
		return 0, nil
	}
	if b.Auto() {
		mi, err := memoryInfo()
		if n := AutoBudget(mi); err == nil && n > 0 {
			return n, nil
		}
		if err == nil {
			err = fmt.Errorf("no figure reported")
		}
		return 0, Usagef("--budget auto: cannot read the available memory of this machine (%v); give a size such as 8GB", err)
	}
	n, err := ParseSize(b.Budget)
	if err != nil {
		return 0, Usagef("--budget %q: %v", b.Budget, err)
	}
	if n == 0 {
		return 0, Usagef("--budget %q: must be positive (--preset max for no limit)", b.Budget)
	}
	return n, nil
}

// ParseSize reads a byte count: a number with an optional unit, B, KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); K, M, G,
// T alone mean the decimal units. Case does not matter.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult := map[string]float64{"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("bad size unit in %q (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	if v*mult > 1<<62 {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return int64(v * mult), nil
}

// SignalContext returns a context that Ctrl-C (SIGINT) cancels; cancel
// restores the default handling.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}
