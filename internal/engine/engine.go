// Package engine is what runs behind k3's public API: it opens a
// checkpoint with direct I/O, plans the RAM budget (internal/engine/planner),
// builds the weight sources (the streaming trunk, internal/engine/trunk, and
// the expert stream, package expert) and the model (package model), and
// runs the sequences: every sequence's step goes through one batcher that
// builds shared passes from many sequences (decode rows, prefill rows,
// speculative rows), and each generation samples and speculates on its
// caller's goroutine.
//
// The root package k3 wraps it: Engine is k3.Model's engine, Seq is a
// k3.Session's sequence. Nothing here is part of the public API.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/internal/engine/draft"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/internal/engine/trunk"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tokenizer"
)

// Compression selects how a compressed packed trunk is used (the values of
// k3.Compression).
type Compression int

// The compression modes.
const (
	CompressionAuto Compression = iota
	CompressionOn
	CompressionOff
)

// Options configure Open; they are k3.Options, resolved (see its fields'
// documentation).
type Options struct {
	RAMBudget                                   int64
	Threads, MaxContext, PrefillChunk           int
	Sessions, MaxBatch, Speculate, IOQueueDepth int
	TokenizerDir, TrunkDir                      string
	TrunkCompression                            Compression
	Logger                                      *slog.Logger
	// Tokenizer turns generated tokens into text (nil: no text).
	Tokenizer *tokenizer.Tokenizer
	// WrapSource, if set, wraps every file the engine reads (tests inject
	// I/O faults with it).
	WrapSource func(path string, f *iox.File) iox.Source
	// MachineMemory, if set, replaces the machine's memory limit that a
	// model without a budget must fit (tests shrink the machine).
	MachineMemory func() int64
	// Prefix turns the prefix cache on (nil: off).
	Prefix *PrefixOptions
	// Cluster makes this engine rank 0 of a cluster (Cluster.Peers).
	Cluster ClusterOptions
	// AutoContext, with MaxContext zero, sizes the context to the largest
	// the budget holds for Sessions sessions (ContextLimit at most).
	AutoContext bool
}

// DefaultMaxContext is the context a session holds when Options.MaxContext
// is zero.
const DefaultMaxContext = 4096

// DefaultContextLimit bounds AutoContext for a model whose config does not
// give max_position_embeddings: the released model's.
const DefaultContextLimit = 1 << 20

// ContextLimit is the longest context AutoContext gives cfg's model: its
// max_position_embeddings, or DefaultContextLimit.
func ContextLimit(cfg *model.Config) int {
	if cfg.MaxPositions > 0 {
		return cfg.MaxPositions
	}
	return DefaultContextLimit
}

// Engine owns everything behind a k3.Model: the checkpoint, the direct-I/O
// files and reader, the off-heap buffers, the worker pool, the memory
// plan, the weight sources and the model, the batcher, and the places the
// budget reserves for sequences' state.
type Engine struct {
	ck      *iox.Checkpoint
	files   []*iox.File
	srcs    []iox.Source  // what reads go to: the files, or test wrappers
	paths   []string      // of files, for detecting replacement
	stats   []os.FileInfo // of files at open
	reader  *iox.Reader
	pool    *par.Pool
	m       *model.Model
	mem     *planner.MemoryPlan // the resting plan (res.Plans[0])
	trunk   *trunk.Trunk
	xs      *expert.Stream  // nil when every expert is resident
	prefix  *prefixCache    // nil when the prefix cache is off
	cluster *cluster.Client // nil in one process
	opts    Options
	log     *slog.Logger
	tok     *tokenizer.Tokenizer

	mu   sync.Mutex
	bufs []*iox.Buffer

	// Where the budget goes now (residency.go): the plans it moves
	// between, the current one, and what the current plan mapped; all but
	// cur and moves are touched by the batcher's goroutine only, once
	// Open is done.
	res        *planner.Residency
	cur        atomic.Int32
	moves      atomic.Int64
	moveErr    error
	sc         *model.Scratch
	scratchBuf []byte
	cacheArena []byte
	moveCtx    context.Context
	moveCancel context.CancelFunc

	// limit is this engine's claim on the Go runtime's memory limit (nil
	// without a budget).
	limit *planner.LimitClaim

	wrapSource func(path string, f *iox.File) iox.Source

	pathChecked atomic.Int64          // unix nanoseconds of the last path check
	filesErr    atomic.Pointer[error] // the first change found in the files

	// Reader counters at the end of Open, so Stats reports run time only.
	loadBytes int64
	loadBusy  time.Duration

	closed atomic.Bool
	active sync.WaitGroup // running steps
	b      *batcher

	// slots holds one token per sequence holding state, under a budget
	// (nil without one: sequences are then unlimited).
	slots chan struct{}
	defMu sync.Mutex
	def   *Seq // the default sequence (k3.Model.Step)

	// Speculative decoding: passes, their rows, accepted drafts; the most
	// drafts per step the budget reserved rollback buffers for (-1: no
	// budget, no bound), the process's index of recent outputs, and the
	// acceptance record every sequence's drafts add to.
	specPasses, specRows, specAccepted atomic.Int64
	specMax                            int
	index                              *draft.Index
	indexOnce                          sync.Once
	specShared                         specpolicy.Shared
	// Constrained generations, and the tokens masked and the time it took.
	constrained, maskTokens, maskNanos atomic.Int64
}

// Open loads the checkpoint in dir with the config cfg (ReadConfig).
func Open(ctx context.Context, dir string, cfg *model.Config, opts Options) (_ *Engine, err error) {
	auto := opts.AutoContext && opts.MaxContext == 0
	if opts.MaxContext == 0 {
		opts.MaxContext = DefaultMaxContext
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkSlice(dir, 0, len(opts.Cluster.Peers)+1); err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, log: log, tok: opts.Tokenizer, wrapSource: opts.WrapSource}
	// The budget is the process's peak RSS, so Open starts from a collected
	// heap returned to the system: a model closed before this one leaves
	// its heap as garbage, and the buffers allocated next are off-heap, so
	// nothing would make the collector run before they add to it.
	debug.FreeOSMemory()
	// While Open reads the index and plans, the Go runtime may use the
	// whole budget less the executable; the claim narrows to the plan's
	// heap share before the buffers are allocated.
	if opts.RAMBudget > 0 {
		e.limit = planner.ClaimMemoryLimit(opts.RAMBudget - rss.ExecutableBytes())
	}
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	if e.ck, err = iox.OpenCheckpointContext(ctx, dir); err != nil {
		return nil, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	plan, err := model.NewPlan(cfg, e.ck)
	if err != nil {
		return nil, fmt.Errorf("k3: %s: %w", dir, CheckpointErr(err))
	}
	for _, sh := range e.ck.Shards {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
		f, err := iox.OpenFile(sh.Path, iox.FileOptions{Direct: true})
		if err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
		if err := e.addFile(f, sh.Path); err != nil {
			return nil, err
		}
		if f.Size() != sh.Header.FileSize {
			return nil, fmt.Errorf("k3: %s: %w: size changed from %d to %d bytes since it was indexed", sh.Path, model.ErrBadCheckpoint, sh.Header.FileSize, f.Size())
		}
	}
	// The content fingerprint, for packed trunks and saved states.
	if _, err := plan.Ckpt.Fingerprint(); err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	if len(opts.Cluster.Peers) > 0 {
		if err := checkClusterOptions(opts); err != nil {
			return nil, err
		}
		if e.cluster, err = e.connect(ctx, plan); err != nil {
			return nil, fmt.Errorf("k3: cluster: %w", err)
		}
		if plan, err = plan.Shard(0, e.cluster.Size()); err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
	}
	if e.reader, err = iox.NewReader(iox.ReaderOptions{QueueDepth: opts.IOQueueDepth}); err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	lay := trunk.NewLayout(plan)
	if opts.TrunkDir != "" {
		if err := e.usePacked(ctx, lay, opts.TrunkDir, opts.TrunkCompression); err != nil {
			return nil, err
		}
	}
	w, req := lay.Weights(), budgetRequest(dir, opts)
	if auto {
		// 0: not even the default context fits; the plan says what the
		// floor needs.
		n := autoContext(w, req, ContextLimit(cfg), opts.MachineMemory)
		if n == 0 {
			n = min(DefaultMaxContext, ContextLimit(cfg))
		}
		opts.MaxContext, req.MaxContext, e.opts.MaxContext = n, n, n
	}
	if e.res, err = planner.NewResidency(w, req); err != nil {
		return nil, contextErr(w, req, err, nil)
	}
	e.mem = e.res.Plans[0]
	e.moveCtx, e.moveCancel = moveContext()
	if opts.RAMBudget == 0 {
		if err := checkResidentFits(e.mem, opts.MachineMemory); err != nil {
			return nil, contextErr(w, req, err, opts.MachineMemory)
		}
	}
	// From here on the Go heap (and its garbage) must fit beside the
	// off-heap buffers about to be allocated.
	e.limit.Set(e.mem.HeapLimit())
	log.Info("k3: memory plan", "plan", e.mem.String())
	e.pool = par.New(opts.Threads)
	if err := e.load(ctx, lay); err != nil {
		return nil, fmt.Errorf("k3: loading %s: %w", dir, CheckpointErr(err))
	}
	rs := e.reader.Stats()
	e.loadBytes, e.loadBusy = rs.BytesRead, rs.BusyTime
	if opts.Prefix != nil {
		if err := e.openPrefixCache(opts.Prefix); err != nil {
			return nil, err
		}
	}
	if opts.RAMBudget > 0 {
		e.slots = make(chan struct{}, max(opts.Sessions, 1))
	}
	// A prompt may fill a pass unless the caller capped its share.
	var room passRoom = e
	if len(e.res.Plans) == 1 {
		room = fixedRoom{e.sc}
	}
	e.b = newBatcher(log, e.m, room, opts.PrefillChunk)
	// Before any step reaches the batcher (its goroutine reads it only
	// for a queued step).
	e.b.spec = e.newPassSpec()
	log.Info("k3: model loaded", "dir", dir, "layers", cfg.Layers, "experts", cfg.Experts, "vocab", cfg.Vocab)
	return e, nil
}

// load builds the weight sources the plan asks for and the model over
// them: the trunk (pinned parts and the ring), the expert stream (or every
// expert resident), the embeddings (resident or read per token).
func (e *Engine) load(ctx context.Context, lay *trunk.Layout) error {
	var err error
	if e.trunk, err = trunk.New(ctx, lay, e.mem, e.read, e.alloc); err != nil {
		return err
	}
	plan := lay.Plan()
	mo := model.Options{Chunk: e.mem.Rows, Pool: e.pool, Alloc: e.alloc, Layers: e.trunk}
	if e.cluster != nil {
		mo.Ranks = e.cluster
	}
	if e.opts.RAMBudget > 0 {
		mo.EmbedPerToken = !e.mem.EmbedResident
		slots := e.mem.CacheSlots
		arena, err := e.alloc(int64(slots) * e.mem.CacheSlotBytes)
		if err != nil {
			return fmt.Errorf("expert cache: %w", err)
		}
		e.cacheArena = arena
		if e.xs, err = expert.NewStream(plan.Experts(), plan.Cfg.TopK, slots, arena, e.read, 0); err != nil {
			return err
		}
		mo.Experts = e.xs
	}
	if e.m, err = model.Load(ctx, plan, e.read, mo); err != nil {
		return err
	}
	return e.newScratch(e.mem)
}

// usePacked points the layout's trunk reads at a packed trunk (k3 pack). A
// compressed pack is used when mode says so, or in CompressionAuto when a
// sample of the trunk measured here says decoding beats the disk;
// otherwise the trunk is read from the checkpoint's shards.
func (e *Engine) usePacked(ctx context.Context, lay *trunk.Layout, dir string, mode Compression) error {
	x, err := trunk.ReadPackIndex(dir)
	if err != nil {
		return fmt.Errorf("k3: packed trunk %s: %w", dir, CheckpointErr(err))
	}
	if x.Compressed {
		// Refuse another checkpoint's pack even when it will not be used.
		if fp, err := lay.Plan().Ckpt.Fingerprint(); err != nil || fp != x.Fingerprint {
			return fmt.Errorf("k3: packed trunk %s: %w: %w: it was packed from a checkpoint with other contents (fingerprint %s, this one %s)",
				dir, model.ErrBadCheckpoint, trunk.ErrPackMismatch, x.Fingerprint, fp)
		}
		use, err := e.decideCompression(ctx, lay, mode)
		if err != nil {
			return err
		}
		if !use {
			return nil
		}
	}
	path := filepath.Join(dir, trunk.PackedDataFile)
	f, err := iox.OpenFile(path, iox.FileOptions{Direct: true})
	if err != nil {
		return fmt.Errorf("k3: packed trunk: %w", err)
	}
	if err := e.addFile(f, path); err != nil {
		return err
	}
	if err := lay.UsePack(x, len(e.files)-1, f.Size()); err != nil {
		return fmt.Errorf("k3: packed trunk %s: %w: %w", dir, model.ErrBadCheckpoint, err)
	}
	return nil
}

// decideCompression says whether to read the trunk from a compressed pack.
func (e *Engine) decideCompression(ctx context.Context, lay *trunk.Layout, mode Compression) (bool, error) {
	switch mode {
	case CompressionOn:
		e.log.Info("k3: trunk: compressed pack (TrunkCompression on)")
		return true, nil
	case CompressionOff:
		e.log.Info("k3: trunk: compressed pack not used (TrunkCompression off); reading the checkpoint's shards")
		return false, nil
	case CompressionAuto:
	default:
		return false, fmt.Errorf("k3: %w: TrunkCompression %d", ErrBadOptions, mode)
	}
	r, err := lay.MeasureCompression(ctx, e.read, e.alloc, true)
	if err != nil {
		return false, fmt.Errorf("k3: %w", err)
	}
	if r.Pays {
		e.log.Info("k3: trunk: compressed pack chosen", "report", r.String())
	} else {
		e.log.Info("k3: trunk: compressed pack not used, reading the checkpoint's shards", "report", r.String())
	}
	return r.Pays, nil
}

// pathCheckInterval is how often checkFiles looks for replaced files.
const pathCheckInterval = time.Second

// addFile records an opened file and its identity on disk.
func (e *Engine) addFile(f *iox.File, path string) error {
	e.files = append(e.files, f)
	var src iox.Source = f
	if e.wrapSource != nil {
		src = e.wrapSource(path, f)
	}
	e.srcs = append(e.srcs, src)
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("k3: %w", err)
	}
	e.paths = append(e.paths, path)
	e.stats = append(e.stats, st)
	return nil
}

// checkFiles fails if a checkpoint file was truncated, extended, modified
// or replaced since Open: reading on would mix two checkpoints or read
// past the end. The open descriptors are checked before every step
// (fstat, no allocation); the paths, for a file replaced by another (whose
// old bytes the engine still reads consistently meanwhile), at most once
// per pathCheckInterval.
func (e *Engine) checkFiles() error {
	if err := e.filesErr.Load(); err != nil {
		return *err // a change, once seen, is final
	}
	if err := e.checkFilesNow(); err != nil {
		e.failFiles(err)
		return err
	}
	return nil
}

// failFiles records the first change found (a separate function, so that
// only a failing check moves its error to the heap).
func (e *Engine) failFiles(err error) { e.filesErr.CompareAndSwap(nil, &err) }

func (e *Engine) checkFilesNow() error {
	for _, f := range e.files {
		if err := f.Unchanged(); err != nil {
			return fmt.Errorf("k3: %w: %w", model.ErrBadCheckpoint, err)
		}
	}
	now := time.Now().UnixNano()
	if last := e.pathChecked.Load(); now-last < int64(pathCheckInterval) || !e.pathChecked.CompareAndSwap(last, now) {
		return nil
	}
	for i := range e.files {
		st, err := os.Stat(e.paths[i])
		if err != nil {
			return fmt.Errorf("k3: %w: %s: %w", model.ErrBadCheckpoint, e.paths[i], err)
		}
		if !os.SameFile(st, e.stats[i]) {
			return fmt.Errorf("k3: %w: %s was replaced on disk since it was opened", model.ErrBadCheckpoint, e.paths[i])
		}
	}
	return nil
}

// read performs one extent read through the direct-I/O reader and returns
// only when no read will write into buf any more, so the buffer may be
// reused or freed.
func (e *Engine) read(ctx context.Context, x iox.Extent, buf []byte) error {
	_, w := x.Window()
	f := e.reader.Submit(ctx, iox.Request{Src: e.srcs[x.File], Off: x.Off, Len: int(x.Size), Dst: buf[x.Region : x.Region+w]})
	_, err := f.Wait()
	<-f.Released()
	if errors.Is(err, iox.ErrFileChanged) {
		err = fmt.Errorf("%w: %w", model.ErrBadCheckpoint, err)
	}
	return err
}

// alloc returns an aligned, off-heap buffer backed by huge pages where the
// kernel allows, pre-faulted so that direct reads run at full speed and the
// memory shows in RSS at once.
func (e *Engine) alloc(n int64) ([]byte, error) {
	// Huge pages only where their 2 MiB rounding is small; the plan counts
	// it (planner.BufferBytes).
	b, err := iox.AllocAligned(int(n), iox.BufferOptions{HugePages: n >= planner.HugeBufferMin, Populate: true})
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	e.mu.Lock()
	e.bufs = append(e.bufs, b)
	e.mu.Unlock()
	return b.Bytes(), nil
}

// Close stops every running step (they end with model.ErrClosed at the
// next layer boundary), waits for them, then releases memory and files. It
// is safe to call more than once.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.m.Interrupt()
	if e.moveCancel != nil {
		e.moveCancel() // a move's reads stop too
	}
	e.b.close()
	e.active.Wait()
	return e.release()
}

// release frees everything in dependency order: the model and its weight
// sources (which wait for their reads), the reader, the files, the
// buffers, the memory-limit claim.
func (e *Engine) release() error {
	var errs []error
	if e.prefix != nil {
		errs = append(errs, e.prefix.close())
	}
	if e.moveCancel != nil {
		e.moveCancel()
	}
	if e.m != nil {
		e.m.Close()
	}
	if e.cluster != nil {
		errs = append(errs, e.cluster.Close())
	}
	if e.trunk != nil {
		e.trunk.Close()
	}
	if e.xs != nil {
		e.xs.Close()
	}
	if e.reader != nil {
		errs = append(errs, e.reader.Close())
	}
	for _, f := range e.files {
		errs = append(errs, f.Close())
	}
	e.mu.Lock()
	for _, b := range e.bufs {
		b.Free()
	}
	e.bufs = nil
	e.mu.Unlock()
	if e.pool != nil {
		e.pool.Close()
	}
	e.limit.Release()
	if e.ck != nil {
		errs = append(errs, e.ck.Close())
	}
	return errors.Join(errs...)
}

// enter registers a running step; it fails once the engine is closed.
func (e *Engine) enter() error {
	e.active.Add(1)
	if e.closed.Load() {
		e.active.Done()
		return fmt.Errorf("k3: model %w", model.ErrClosed)
	}
	return nil
}

func (e *Engine) leave() { e.active.Done() }

// Config returns the model's configuration.
func (e *Engine) Config() *model.Config { return e.m.Cfg }

// Memory returns the memory plan the engine runs with.
func (e *Engine) Memory() *planner.MemoryPlan { return e.mem }

// CheckpointDir returns the checkpoint's directory.
func (e *Engine) CheckpointDir() string { return e.ck.Dir }

// MaxContext is the positions each sequence holds: Options.MaxContext, or
// what AutoContext chose.
func (e *Engine) MaxContext() int { return e.opts.MaxContext }

// Fingerprint returns the checkpoint's content fingerprint (computed at
// Open).
func (e *Engine) Fingerprint() string {
	fp, _ := e.m.Plan.Ckpt.Fingerprint()
	return fp
}

// ObservePasses makes f be called after every forward pass with its token
// rows and wall time (nil stops the calls); see k3.Model.ObservePasses.
func (e *Engine) ObservePasses(f func(rows int, d time.Duration)) {
	if f == nil {
		e.b.observe.Store(nil)
		return
	}
	e.b.observe.Store(&f)
}
