package k3

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tokenizer"
)

// Config is the model configuration read from config.json.
type Config = model.Config

// Options configure Open. The zero value is valid: everything resident,
// GOMAXPROCS threads, a 4096-position context per session.
type Options struct {
	// RAMBudget is a hard limit in bytes on the memory the engine uses for
	// weights, caches, state and buffers. Zero means no limit: every
	// weight is read into memory at Open.
	RAMBudget int64
	// Threads is the number of goroutines the kernels use; zero means
	// GOMAXPROCS.
	Threads int
	// MaxContext is the number of positions one session can hold (prompt
	// plus generated tokens); zero means 4096. It bounds the MLA cache.
	MaxContext int
	// PrefillChunk is the number of tokens that share one pass over the
	// weights during prefill. It changes speed and scratch memory, never
	// results. Zero means 64.
	PrefillChunk int
	// TokenizerDir holds tiktoken.model and tokenizer_config.json. Empty
	// means the checkpoint directory; if the files are absent there, the
	// model has no tokenizer and text operations return ErrNoTokenizer.
	TokenizerDir string
	// TrunkDir is a packed trunk written by Pack (k3 pack): the dense
	// weights of every layer in one file, read with one aligned request per
	// layer part. Empty means: read the trunk from the shards.
	TrunkDir string
	// Sessions is the number of sessions the budget reserves state for
	// (KDA state, MLA cache of MaxContext positions, scratch); zero means 1.
	Sessions int
	// IOQueueDepth is the number of reads kept in flight; zero means 8.
	IOQueueDepth int
	// Logger receives load decisions at Info and per-step events at Debug.
	// Nil discards everything.
	Logger *slog.Logger
}

const defaultMaxContext = 4096

// Model is a loaded Kimi K3 checkpoint. It is safe for concurrent use:
// every Session created from it runs independently. Model.Step and
// Model.Generate use one default session and must not be called
// concurrently with each other.
type Model struct {
	m      *model.Model
	e      *engine
	tok    *tokenizer.Tokenizer
	eos    []int // generation_config.json's eos_token_id
	opts   Options
	log    *slog.Logger
	closed atomic.Bool
	active sync.WaitGroup // running forward passes
	mu     sync.Mutex
	def    *Session

	// slots holds one token per session holding state, under a budget
	// (nil without one: sessions are then unlimited).
	slots chan struct{}
}

// takeSessionSlot reserves room in the budget for one more session's
// state, or fails with ErrBudget.
func (m *Model) takeSessionSlot() error {
	if m.slots == nil {
		return nil
	}
	select {
	case m.slots <- struct{}{}:
		return nil
	default:
		return fmt.Errorf("k3: %w: %d sessions already hold state, as many as the budget reserves (Options.Sessions); close one", ErrBudget, cap(m.slots))
	}
}

func (m *Model) releaseSessionSlot() {
	if m.slots != nil {
		<-m.slots
	}
}

// Open loads the checkpoint in dir (config.json plus safetensors shards,
// one file or several with model.safetensors.index.json).
func Open(dir string, opts Options) (*Model, error) {
	return OpenContext(context.Background(), dir, opts)
}

// OpenContext is Open with a context that can cancel loading.
func OpenContext(ctx context.Context, dir string, opts Options) (*Model, error) {
	if opts.RAMBudget < 0 || opts.Threads < 0 || opts.MaxContext < 0 || opts.PrefillChunk < 0 || opts.Sessions < 0 || opts.IOQueueDepth < 0 {
		return nil, fmt.Errorf("k3: %w: negative value in %+v", ErrBadOptions, opts)
	}
	if opts.MaxContext == 0 {
		opts.MaxContext = defaultMaxContext
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("k3: %w: %w", ErrBadConfig, err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("k3: %s: %w", cfgPath, err)
	}
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", checkpointErr(err))
	}
	ok := false
	defer func() {
		if !ok {
			ck.Close()
		}
	}()
	plan, err := model.NewPlan(cfg, ck)
	if err != nil {
		return nil, fmt.Errorf("k3: %s: %w", dir, checkpointErr(err))
	}
	tok, err := loadTokenizer(dir, opts.TokenizerDir)
	if err != nil {
		return nil, err
	}
	eos, err := loadGenerationEOS(dir, opts.TokenizerDir)
	if err != nil {
		return nil, err
	}
	e, err := newEngine(ctx, ck, plan, opts, log)
	if err != nil {
		return nil, err
	}
	log.Info("k3: model loaded", "dir", dir, "layers", cfg.Layers, "experts", cfg.Experts, "vocab", cfg.Vocab)
	ok = true
	mod := &Model{m: e.m, e: e, tok: tok, eos: eos, opts: opts, log: log}
	if opts.RAMBudget > 0 {
		mod.slots = make(chan struct{}, max(opts.Sessions, 1))
	}
	return mod, nil
}

// loadTokenizer loads the tokenizer from dir (or the checkpoint directory).
// Files absent from the checkpoint directory mean no tokenizer; absent
// from an explicit directory, an error.
func loadTokenizer(ckptDir, dir string) (*tokenizer.Tokenizer, error) {
	explicit := dir != ""
	if !explicit {
		dir = ckptDir
		if _, err := os.Stat(filepath.Join(dir, tokenizer.ModelFile)); err != nil {
			return nil, nil
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("k3: tokenizer: %w", err)
	}
	return tok, nil
}

// Tokenizer returns the model's tokenizer, or nil if it has none.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// Config returns the model configuration.
func (m *Model) Config() Config { return *m.m.Cfg }

// Close stops every running generation (they end with ErrClosed at the next
// layer boundary), waits for them, then releases memory and files. It is
// safe to call more than once.
func (m *Model) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.m.Interrupt()
	m.active.Wait()
	return m.e.close()
}

// enter registers a running forward pass; it fails once the Model is
// closed.
func (m *Model) enter() error {
	m.active.Add(1)
	if m.closed.Load() {
		m.active.Done()
		return fmt.Errorf("k3: %w", ErrClosed)
	}
	return nil
}

func (m *Model) leave() { m.active.Done() }

// defaultSession returns the session behind Model.Step.
func (m *Model) defaultSession() *Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.def == nil {
		m.def = m.NewSession()
	}
	return m.def
}

// Step appends tokens to the default session and returns the logits of the
// last position. See Session.Step.
func (m *Model) Step(ctx context.Context, tokens []int) ([]float32, error) {
	return m.defaultSession().Step(ctx, tokens)
}
