package k3

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// OptionError is an Options field that Open or Inspect refuses: which
// field, the value given and why. It wraps ErrBadOptions when the value is
// invalid in itself (negative, out of range, a directory that does not
// exist), ErrBudget when it is valid but the RAM budget (with no budget,
// the machine's memory) cannot hold it: a context too long for the
// budget names MaxContext, not RAMBudget.
type OptionError struct {
	// Field is the field's name in Options, e.g. "MaxContext", or
	// "PrefixCache.BlockTokens" for a field of the prefix cache's options.
	Field string
	// Value is the value given.
	Value any
	// Reason says why the value is refused and, where it can, what
	// would work.
	Reason string
	// Err is ErrBadOptions or ErrBudget.
	Err error
}

func (e *OptionError) Error() string {
	v := e.Value
	if s, ok := v.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("k3: Options.%s = %v: %s", e.Field, v, e.Reason)
}

// Unwrap returns ErrBadOptions or ErrBudget.
func (e *OptionError) Unwrap() error { return e.Err }

// Bounds on Options that keep a value from asking for absurd amounts of
// threads, sessions or memory (and the planner's sums from overflowing).
const (
	maxThreads   = 4096
	maxSessions  = 1 << 16
	maxRows      = 1 << 24 // PrefillChunk, MaxBatch
	maxSpeculate = 64
)

// Validate checks the options field by field, as Open and Inspect do
// before they read anything: the first field refused, as an *OptionError
// wrapping ErrBadOptions, or nil. What depends on the model (a context
// longer than its limit, or than the budget holds) is Open's to check.
func (opts Options) Validate() error {
	bad := func(field string, v any, reason string) error {
		return &OptionError{Field: field, Value: v, Reason: reason, Err: ErrBadOptions}
	}
	ints := []struct {
		field    string
		v, limit int
		zero     string
	}{
		{"Threads", opts.Threads, maxThreads, "GOMAXPROCS"},
		{"MaxContext", opts.MaxContext, math.MaxInt32, "the default"},
		{"PrefillChunk", opts.PrefillChunk, maxRows, "as many as a pass holds"},
		{"Sessions", opts.Sessions, maxSessions, "1"},
		{"MaxBatch", opts.MaxBatch, maxRows, "the planner's choice"},
		{"Speculate", opts.Speculate, maxSpeculate, "no speculation; SpeculateAuto, -1, lets the engine decide"},
		{"IOQueueDepth", opts.IOQueueDepth, iox.MaxQueueDepth, "8"},
	}
	if opts.RAMBudget < 0 {
		return bad("RAMBudget", opts.RAMBudget, "must not be negative (0 means no limit: every weight resident)")
	}
	for _, f := range ints {
		switch {
		case f.field == "Speculate" && f.v == SpeculateAuto:
		case f.v < 0:
			return bad(f.field, f.v, fmt.Sprintf("must not be negative (0 means %s)", f.zero))
		case f.v > f.limit:
			return bad(f.field, f.v, fmt.Sprintf("must be at most %d", f.limit))
		}
	}
	switch opts.TrunkCompression {
	case CompressionAuto, CompressionOn, CompressionOff:
	default:
		return bad("TrunkCompression", opts.TrunkCompression, "must be CompressionAuto, CompressionOn or CompressionOff")
	}
	if opts.AutoContext && opts.MaxContext > 0 {
		return bad("AutoContext", true, fmt.Sprintf("sizes the context, but MaxContext gives it (%d)", opts.MaxContext))
	}
	for _, d := range []struct{ field, dir string }{{"TokenizerDir", opts.TokenizerDir}, {"TrunkDir", opts.TrunkDir}} {
		if err := checkDir(d.dir); d.dir != "" && err != nil {
			return bad(d.field, d.dir, err.Error())
		}
	}
	if c := opts.Cluster; c != nil {
		switch {
		case c.Timeout < 0:
			return bad("Cluster.Timeout", c.Timeout, "must not be negative (0 means 30s)")
		case c.LoadTimeout < 0:
			return bad("Cluster.LoadTimeout", c.LoadTimeout, "must not be negative (0 means 30m)")
		}
	}
	if p := opts.PrefixCache; p != nil {
		switch {
		case p.BlockTokens < 0:
			return bad("PrefixCache.BlockTokens", p.BlockTokens, "must not be negative (0 means 256)")
		case p.BlockTokens > maxRows:
			return bad("PrefixCache.BlockTokens", p.BlockTokens, fmt.Sprintf("must be at most %d", maxRows))
		case p.CheckpointBlocks < 0:
			return bad("PrefixCache.CheckpointBlocks", p.CheckpointBlocks, "must not be negative (0 lets k3 choose)")
		}
	}
	return nil
}

// checkFor is what Open and Inspect do before anything else: the options
// checked field by field, the checkpoint directory and its config read,
// and the options completed for that model (forModel).
func (opts Options) checkFor(dir string) (*model.Config, Options, error) {
	if err := opts.Validate(); err != nil {
		return nil, opts, err
	}
	if err := checkCheckpointDir(dir); err != nil {
		return nil, opts, err
	}
	cfg, err := engine.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, opts, err
	}
	opts, err = opts.forModel(cfg)
	return cfg, opts, err
}

// forModel validates what depends on the model, a context longer than
// its config's max_position_embeddings or whose KV cache could not even
// be counted in bytes, and returns opts with the default context (4096, or
// the model's limit if that is less) filled in unless AutoContext chooses.
func (opts Options) forModel(cfg *model.Config) (Options, error) {
	n := opts.MaxContext
	if n == 0 {
		if !opts.AutoContext {
			opts.MaxContext = engine.DefaultMaxContext
			if cfg.MaxPositions > 0 {
				opts.MaxContext = min(opts.MaxContext, cfg.MaxPositions)
			}
		}
		return opts, nil
	}
	if cfg.MaxPositions > 0 && n > cfg.MaxPositions {
		return opts, &OptionError{Field: "MaxContext", Value: n, Err: ErrBadOptions,
			Reason: fmt.Sprintf("the model's limit is %d positions (max_position_embeddings in config.json)", cfg.MaxPositions)}
	}
	_, perPos := model.StateBytes(cfg)
	if perPos > 0 && int64(n) > math.MaxInt64/4/perPos/int64(max(opts.Sessions, 1)) {
		return opts, &OptionError{Field: "MaxContext", Value: n, Err: ErrBadOptions,
			Reason: fmt.Sprintf("its KV cache (%d bytes a position) would be larger than any memory", perPos)}
	}
	return opts, nil
}

// checkDir says why dir is not a directory that can be read: "does not
// exist", "is not a directory", or the error of stat.
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("the directory does not exist")
	case err != nil:
		return err
	case !st.IsDir():
		return errors.New("not a directory")
	}
	return nil
}

// checkCheckpointDir refuses a checkpoint directory that is not there
// before anything is read, so that a typo does not read as a damaged
// checkpoint: it does not exist (fs.ErrNotExist), is not a directory, or
// holds no config.json (ErrBadConfig).
func checkCheckpointDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("k3: checkpoint directory %s does not exist: %w", dir, fs.ErrNotExist)
	case err != nil:
		return fmt.Errorf("k3: checkpoint directory: %w", err)
	case !st.IsDir():
		return fmt.Errorf("k3: %w: %s is not a directory (give the checkpoint's directory)", ErrBadOptions, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("k3: %w: %s has no config.json: not a checkpoint directory (config.json and *.safetensors)", ErrBadConfig, dir)
	}
	return nil
}

// fromEngine turns the engine's refusal of an option into an
// *OptionError; other errors pass through.
func fromEngine(err error) error {
	var oe *engine.OptionError
	if errors.As(err, &oe) {
		return &OptionError{Field: oe.Field, Value: oe.Value, Reason: oe.Reason, Err: oe.Err}
	}
	return err
}
