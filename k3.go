package k3

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/tokenizer"
)

// Options configure Open. The zero value is valid: everything resident,
// GOMAXPROCS threads, a 4096-position context per session.
type Options struct {
	// RAMBudget is a hard limit in bytes on the peak resident set of the
	// process: weights, caches, state and buffers, the Go heap with its
	// garbage and the runtime, the tokenizer, the executable's own pages.
	// Open sets the Go runtime's memory limit (runtime/debug) to the
	// heap's share of it until Close. Memory the rest of the program holds
	// counts against it too; the plan leaves a few MB for that. Zero means
	// no limit: every weight is read into memory at Open.
	RAMBudget int64
	// Threads is the number of goroutines the kernels use; zero means
	// GOMAXPROCS.
	Threads int
	// MaxContext is the number of positions one session can hold (prompt
	// plus generated tokens); zero means 4096, or what AutoContext
	// chooses. It bounds the MLA cache, whose room the budget reserves for
	// every session; Model.MaxContext reports it.
	MaxContext int
	// AutoContext, with MaxContext zero, makes the context the largest
	// the RAM budget holds for Sessions sessions (beside the model's
	// floor: the pinned trunk and the expert cache then get only what is
	// left), at most the model's max_position_embeddings (1,048,576 when
	// config.json does not say). With no budget it is the largest whose
	// resident plan fits the machine's memory. Never less than the
	// default (4096, or the model's limit if less): a budget that cannot
	// hold that is below the floor Inspect reports, and Open refuses it
	// as it would without AutoContext. A long context costs memory only as
	// far as it fills, but under a budget its room is set aside at Open.
	AutoContext bool
	// PrefillChunk is the most prompt tokens of one session that share a
	// pass over the weights. Zero lets a prompt fill a pass (MaxBatch
	// rows). It changes speed and scratch memory, never results.
	PrefillChunk int
	// TokenizerDir holds tiktoken.model and tokenizer_config.json. Empty
	// means the checkpoint directory; if the files are absent there, the
	// model has no tokenizer and text operations return ErrNoTokenizer.
	TokenizerDir string
	// TrunkDir is a packed trunk written by Pack (k3 pack): the dense
	// weights of every layer in one file, read with one aligned request per
	// layer part. Empty means: read the trunk from the shards.
	TrunkDir string
	// TrunkCompression says whether a compressed TrunkDir (k3 pack
	// --compress) is decoded or bypassed for the checkpoint's shards. The
	// zero value, CompressionAuto, measures at Open whether this
	// machine's cores decode faster than its disk delivers, and logs the
	// choice.
	TrunkCompression Compression
	// Sessions is the number of sessions the budget reserves state for
	// (KDA state and an MLA cache of MaxContext positions each); zero
	// means 1. Sessions stepping at the same time share passes over the
	// weights.
	Sessions int
	// MaxBatch is the most token rows one pass over the weights carries,
	// summed over every session in it (each session's new tokens are its
	// rows: prompt tokens and decoded tokens share passes). A pass reads
	// the streamed trunk and the experts its rows chose once for all of
	// them, so wide passes make long prompts cheap; their scratch is sized
	// for it, mostly per row (the activations that live across a layer;
	// the rest is computed in tiles of 32 rows). Zero means PrefillChunk
	// if that is set, else the planner's choice: 256 rows at the floor,
	// widened with a quarter of what the budget has above it (up to
	// Sessions × MaxContext; 1024 without a budget). It changes speed and
	// memory, never results.
	MaxBatch int
	// Speculate is the most drafted tokens a generation may verify per
	// pass (GenerateOptions.Speculate), or SpeculateAuto. Under a RAM
	// budget it reserves rollback buffers (a copy of a session's KDA state
	// and room to record a pass's rows, so that rejected drafts roll back
	// without reading weights) and the drafter's tables: with a number, a
	// buffer per session; with SpeculateAuto, buffers for one session in
	// four (at least one) of AutoDraft rows, lent pass by pass to the
	// sequences whose drafts are likeliest. Without a budget any
	// GenerateOptions.Speculate works (the memory is allocated on first
	// use). Zero: no speculation, nothing reserved.
	Speculate int
	// IOQueueDepth is the number of reads kept in flight; zero means 8.
	IOQueueDepth int
	// Logger receives load decisions at Info and per-step events at Debug.
	// Nil discards everything.
	Logger *slog.Logger
	// PrefixCache, if not nil, turns the prefix cache on: a step that
	// feeds a prompt first restores the longest prefix of it that an
	// earlier prompt saved, and prefills only the rest; see
	// PrefixCacheOptions. Nil: off (k3 serve and k3 batch turn it on).
	PrefixCache *PrefixCacheOptions
	// Cluster makes this process rank 0 of a cluster: one model over it
	// and the workers at Cluster.Peers (k3 worker, Worker), each holding
	// and reading its rows of every weight matrix. Nil: this process
	// alone. See ClusterOptions.
	Cluster *ClusterOptions

	// wrapSource, set by tests only, wraps every file the engine reads
	// (to inject I/O faults).
	wrapSource func(path string, f *iox.File) iox.Source
	// machineMemory, set by tests only, replaces the machine's memory
	// limit that a model without a budget must fit.
	machineMemory func() int64
}

// engineOptions resolves opts for the engine.
func (opts Options) engineOptions(tok *tokenizer.Tokenizer) engine.Options {
	return engine.Options{
		RAMBudget: opts.RAMBudget, Threads: opts.Threads, MaxContext: opts.MaxContext, PrefillChunk: opts.PrefillChunk,
		Sessions: opts.Sessions, MaxBatch: opts.MaxBatch, Speculate: opts.Speculate, IOQueueDepth: opts.IOQueueDepth,
		TokenizerDir: opts.TokenizerDir, TrunkDir: opts.TrunkDir, TrunkCompression: engine.Compression(opts.TrunkCompression),
		Logger: opts.Logger, Tokenizer: tok, WrapSource: opts.wrapSource, MachineMemory: opts.machineMemory,
		Prefix: opts.PrefixCache.engineOptions(), Cluster: opts.Cluster.engineOptions(), AutoContext: opts.AutoContext,
	}
}

// Model is a loaded Kimi K3 checkpoint. It is safe for concurrent use:
// every Session created from it is its own sequence, and the steps of
// sessions used from different goroutines at the same time share passes
// over the weights (continuous batching), each with exactly the results it
// would get alone. Model.Generate runs a fresh session per call.
// Model.Step continues one default session; it must not be called from
// several goroutines at once.
type Model struct {
	e      *engine.Engine
	tok    *tokenizer.Tokenizer
	eos    []int // generation_config.json's eos_token_id
	cfg    Config
	opts   Options
	closed atomic.Bool

	vocabOnce sync.Once // GrammarVocab, built on first use
	vocab     *grammar.Vocab
	vocabErr  error
}

// Open loads the checkpoint in dir (config.json plus safetensors shards,
// one file or several with model.safetensors.index.json). It is
// OpenContext with context.Background(), as net.Dial is DialContext's.
func Open(dir string, opts Options) (*Model, error) {
	return OpenContext(context.Background(), dir, opts)
}

// OpenContext is Open with a context that can cancel loading; the context
// comes first, as everywhere in k3, and Open is the short form without it
// (the net.Dial / net.DialContext idiom).
func OpenContext(ctx context.Context, dir string, opts Options) (*Model, error) {
	cfg, opts, err := opts.checkFor(dir)
	if err != nil {
		return nil, err
	}
	tok, err := loadTokenizer(dir, opts.TokenizerDir)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckTokenizerFits(tok, cfg); err != nil {
		return nil, err
	}
	eos, err := loadGenerationEOS(dir, opts.TokenizerDir)
	if err != nil {
		return nil, err
	}
	e, err := engine.Open(ctx, dir, cfg, opts.engineOptions(tok))
	if err != nil {
		return nil, fromEngine(err)
	}
	opts.MaxContext = e.MaxContext()
	return &Model{e: e, tok: tok, eos: eos, cfg: newConfig(cfg), opts: opts}, nil
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
		return nil, fmt.Errorf("k3: tokenizer: %w", engine.CheckpointErr(err))
	}
	return tok, nil
}

// Tokenizer returns the model's tokenizer, or nil if it has none.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// GrammarVocab returns the tokenizer's vocabulary as package grammar needs
// it, to bind a grammar (a JSON Schema, a regular expression) into a
// GenerateOptions.Constraint. It is built on first use (about half a
// second for K3's 163,840 tokens) and shared.
func (m *Model) GrammarVocab() (*grammar.Vocab, error) {
	if m.tok == nil {
		return nil, fmt.Errorf("k3: GrammarVocab: %w", ErrNoTokenizer)
	}
	m.vocabOnce.Do(func() { m.vocab, m.vocabErr = chat.GrammarVocab(m.tok) })
	return m.vocab, m.vocabErr
}

// Config returns the model's architecture, read from config.json.
func (m *Model) Config() Config { return m.cfg }

// MaxContext returns the positions each session holds: Options.MaxContext,
// its default, or what Options.AutoContext chose.
func (m *Model) MaxContext() int { return m.e.MaxContext() }

// Close stops every running generation (they end with ErrClosed at the next
// layer boundary), waits for them, then releases memory and files. It is
// safe to call more than once.
func (m *Model) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	return m.e.Close()
}

// Step appends tokens to the model's default session and returns the
// logits of the last position. See Session.Step. Under a budget the
// default session holds one of the Options.Sessions places while it has
// state; when another session needs that place and the default session is
// idle, it gives the place up and its sequence starts over at the next
// Step (Model.Reset does the same at once).
func (m *Model) Step(ctx context.Context, tokens []int) ([]float32, error) {
	s, done, ok := m.e.DefaultSeq()
	if !ok {
		return nil, fmt.Errorf("k3: Model.Step: %w: called from several goroutines at once; use a Session each", ErrBadOptions)
	}
	defer done()
	return s.Step(ctx, tokens)
}

// Reset drops the default session's sequence (Model.Step) and gives its
// place in the budget back.
func (m *Model) Reset() { m.e.ResetDefault() }
