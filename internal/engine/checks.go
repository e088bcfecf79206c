package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/internal/platform/sysinfo"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tokenizer"
)

// ErrBadOptions reports an invalid option value or call (k3.ErrBadOptions).
var ErrBadOptions = errors.New("invalid options")

// ErrNoTokenizer reports a text operation without a tokenizer
// (k3.ErrNoTokenizer).
var ErrNoTokenizer = errors.New("no tokenizer")

// MaxConfigBytes bounds config.json and generation_config.json (the
// release's are under 4 KiB): they are read whole into memory, so a
// symlink to /dev/zero or a huge file must be refused before reading.
const MaxConfigBytes = 1 << 20

// ReadConfig reads and parses a config.json. A missing, oversized or
// non-regular file is model.ErrBadConfig; a file that exists but cannot be
// read (permissions, I/O) keeps its own error, which is not the config's
// fault.
func ReadConfig(path string) (*model.Config, error) {
	raw, err := iox.ReadFileLimit(path, MaxConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, iox.ErrNotRegular), errors.Is(err, iox.ErrTooLarge):
		return nil, fmt.Errorf("k3: %w: %w", model.ErrBadConfig, err)
	case err != nil:
		return nil, fmt.Errorf("k3: reading config: %w", err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("k3: %s: %w", path, err)
	}
	return cfg, nil
}

// CheckTokenizerFits refuses a tokenizer with ids the model has no
// embedding row for: they would only fail once a generation met them.
func CheckTokenizerFits(tok *tokenizer.Tokenizer, cfg *model.Config) error {
	if tok == nil || tok.VocabSize() <= cfg.Vocab {
		return nil
	}
	return fmt.Errorf("k3: %w: the tokenizer has %d ids, the model's vocabulary %d", model.ErrBadCheckpoint, tok.VocabSize(), cfg.Vocab)
}

// CheckpointErr marks low-level container errors as checkpoint errors.
func CheckpointErr(err error) error {
	if err == nil || errors.Is(err, model.ErrBadCheckpoint) {
		return err
	}
	if errors.Is(err, iox.ErrFormat) || errors.Is(err, iox.ErrCheckpoint) || errors.Is(err, iox.ErrNotFound) || errors.Is(err, iox.ErrNotRegular) {
		return &wrapped{err: err, kind: model.ErrBadCheckpoint}
	}
	return err
}

// wrapped adds a sentinel to an error chain without changing its message.
type wrapped struct {
	err  error
	kind error
}

func (w *wrapped) Error() string   { return w.err.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.err, w.kind} }

// memoryLimit returns the memory the process may hold (RAM, or a smaller
// cgroup limit), 0 if unknown.
func memoryLimit() int64 {
	mi, err := sysinfo.MemoryInfo()
	if err != nil {
		return 0
	}
	return mi.Limit()
}

// checkResidentFits refuses, before anything is allocated, a model opened
// without a budget (everything resident) that needs more memory than the
// machine has: the allocator would otherwise kill the process.
// machine, if not nil, replaces memoryLimit (tests shrink the machine).
func checkResidentFits(mem *planner.MemoryPlan, machine func() int64) error {
	if machine == nil {
		machine = memoryLimit
	}
	limit := machine()
	if limit <= 0 || mem.Total() <= limit {
		return nil
	}
	return fmt.Errorf("%w: with no RAM budget every weight is resident: %s needed, the machine has %s; a budget streams the weights",
		planner.ErrBudget, planner.Human(mem.Total()), planner.Human(limit))
}

// OptionError is an option the engine refuses: k3.OptionError, which k3
// converts it to (the field is named as in k3.Options).
type OptionError struct {
	Field  string
	Value  any
	Reason string
	Err    error // ErrBadOptions or planner.ErrBudget
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("k3: Options.%s = %v: %s", e.Field, e.Value, e.Reason)
}

func (e *OptionError) Unwrap() error { return e.Err }

// autoContext is the context AutoContext gives: the largest, at most
// limit, that the budget holds for req's sessions (planner.MaxContext);
// with no budget, the largest whose resident plan fits the machine's
// memory (limit if the memory is unknown: the KV cache grows only as it
// fills). Never less than the default context (DefaultMaxContext, or limit
// if less): 0 when the budget cannot hold that, which is the budget's
// floor, the one k3 doctor reports.
func autoContext(w *planner.Weights, req planner.Request, limit int, machine func() int64) int {
	var n int
	if req.Budget > 0 {
		n = planner.MaxContext(w, req, limit)
	} else {
		n = residentContext(w, req, limit, machine)
	}
	if n < min(DefaultMaxContext, limit) {
		return 0
	}
	return n
}

// residentContext is the largest context, at most limit, whose plan with
// everything resident fits the machine's memory; 0 if none does, limit if
// the memory is unknown.
func residentContext(w *planner.Weights, req planner.Request, limit int, machine func() int64) int {
	if machine == nil {
		machine = memoryLimit
	}
	mem := machine()
	fits := func(n int) bool {
		r := req
		r.Budget, r.MaxContext = 0, n
		mp, err := planner.Plan(w, r)
		return err == nil && mp.Total() <= mem
	}
	switch {
	case limit < 1:
		return 0
	case mem <= 0 || fits(limit):
		return limit
	case !fits(1):
		return 0
	}
	lo, hi := 1, limit // fits(lo), !fits(hi)
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// contextErr explains a plan that does not fit (err, planner.ErrBudget):
// when the context asked for is longer than the default and the default
// would fit, the context is the cause, and the error names
// Options.MaxContext and the most positions that fit; else the budget is,
// with the floor at the default context (the one k3 doctor reports; with
// no budget, the machine's memory: the error names Options.RAMBudget).
// Other errors pass through.
func contextErr(w *planner.Weights, req planner.Request, err error, machine func() int64) error {
	if !errors.Is(err, planner.ErrBudget) {
		return fmt.Errorf("k3: %w", err)
	}
	_, perPos := model.StateBytes(w.Cfg)
	sessions := max(req.Sessions, 1)
	kv := fmt.Sprintf("its KV cache takes %s for %d session(s) (%s a position)",
		planner.Human(int64(sessions)*perPos*int64(req.MaxContext)), sessions, planner.Human(perPos))
	base := req
	base.MaxContext = min(req.MaxContext, DefaultMaxContext)
	if req.Budget > 0 {
		if req.MaxContext > DefaultMaxContext {
			if _, berr := planner.Plan(w, base); berr != nil {
				err = berr // the floor at the default context does not fit either
			} else {
				n := planner.MaxContext(w, req, req.MaxContext-1)
				return &OptionError{Field: "MaxContext", Value: req.MaxContext, Err: planner.ErrBudget,
					Reason: fmt.Sprintf("the context does not fit the RAM budget: %s; beside the model, a budget of %s holds at most %d positions per session", kv, planner.Human(req.Budget), n)}
			}
		}
		return fmt.Errorf("k3: %w", err)
	}
	if req.MaxContext > DefaultMaxContext && residentContext(w, base, base.MaxContext, machine) == base.MaxContext {
		n := residentContext(w, req, req.MaxContext-1, machine)
		return &OptionError{Field: "MaxContext", Value: req.MaxContext, Err: planner.ErrBudget,
			Reason: fmt.Sprintf("the context does not fit this machine's memory: %s; with no RAM budget every weight is resident too, and the machine holds at most %d positions per session", kv, n)}
	}
	if mp, perr := planner.Plan(w, base); perr == nil && req.MaxContext > DefaultMaxContext {
		err = checkResidentFits(mp, machine) // the weights' own total
	}
	return &OptionError{Field: "RAMBudget", Value: int64(0), Err: planner.ErrBudget,
		Reason: strings.TrimPrefix(strings.TrimPrefix(err.Error(), planner.ErrBudget.Error()), ": ")}
}

// budgetRequest is the one place where Options become the memory planner's
// request: Open plans with it, Inspect (and so k3 doctor, k3 plan and the
// floor every command reports) plans with it, so that the floor is the
// same number everywhere. dir is the checkpoint directory (for the
// tokenizer's files).
func budgetRequest(dir string, opts Options) planner.Request {
	if opts.MaxContext == 0 {
		opts.MaxContext = DefaultMaxContext
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	req := planner.Request{
		Budget: opts.RAMBudget, Sessions: opts.Sessions, MaxContext: opts.MaxContext,
		Chunk: opts.PrefillChunk, MaxBatch: opts.MaxBatch,
		Threads: threads, IOQueueDepth: opts.IOQueueDepth,
		Executable: rss.ExecutableBytes(),
		Tokenizer:  tokenizerBytes(dir, opts.TokenizerDir),
		Ranks:      len(opts.Cluster.Peers) + 1,
	}
	req.Speculate, req.SpecSlots, req.Drafter, req.SpecAuto = specRequest(opts)
	if o := opts.Prefix; o != nil {
		req.PrefixRAM, req.PrefixRAMAuto = max(o.RAMBytes, 0), o.RAMBytes == 0
	}
	return req
}

// tokenizerBytes estimates the heap the tokenizer's tables take, from the
// size of its files: 3.2 times their bytes plus 0.3 MB measured for the
// 200k-rank fixture and the quickstart's small one; 4 times plus 1 MiB
// here. Zero when the model will have no tokenizer (the rule k3.Open
// follows: the files absent from the checkpoint directory).
func tokenizerBytes(ckptDir, dir string) int64 {
	if dir == "" {
		dir = ckptDir
	}
	var n int64
	for _, f := range []string{tokenizer.ModelFile, tokenizer.ConfigFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			n += st.Size()
		} else if f == tokenizer.ModelFile {
			return 0
		}
	}
	return 4*n + 1<<20
}
