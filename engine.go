package k3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// engine owns everything behind a Model: the checkpoint, the direct-I/O
// files and reader, the off-heap buffers, the worker pool and the memory
// plan.
type engine struct {
	ck     *iox.Checkpoint
	files  []*iox.File
	srcs   []iox.Source  // what reads go to: the files, or test wrappers
	paths  []string      // of files, for detecting replacement
	stats  []os.FileInfo // of files at open
	reader *iox.Reader
	pool   *par.Pool
	m      *model.Model
	mem    *model.MemoryPlan

	mu   sync.Mutex
	bufs []*iox.Buffer

	// limit is this engine's claim on the Go runtime's memory limit
	// (nil without a budget).
	limit *limitClaim

	// wrapSource is Options.wrapSource (tests only).
	wrapSource func(path string, f *iox.File) iox.Source

	pathChecked atomic.Int64          // unix nanoseconds of the last path check
	filesErr    atomic.Pointer[error] // the first change found in the files

	// Reader counters at the end of Open, so Stats reports run time only.
	loadBytes int64
	loadBusy  time.Duration
}

func newEngine(ctx context.Context, ck *iox.Checkpoint, plan *model.Plan, opts Options, limit *limitClaim, log *slog.Logger) (_ *engine, err error) {
	e := &engine{ck: ck, limit: limit, wrapSource: opts.wrapSource}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	for _, sh := range ck.Shards {
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
			return nil, fmt.Errorf("k3: %s: %w: size changed from %d to %d bytes since it was indexed", sh.Path, ErrBadCheckpoint, sh.Header.FileSize, f.Size())
		}
	}
	// The content fingerprint, for packed trunks and saved states.
	if _, err := plan.Fingerprint(); err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	if e.reader, err = iox.NewReader(iox.ReaderOptions{QueueDepth: opts.IOQueueDepth}); err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	if opts.TrunkDir != "" {
		if err := e.usePacked(ctx, plan, opts.TrunkDir, opts.TrunkCompression, log); err != nil {
			return nil, err
		}
	}
	if e.mem, err = plan.PlanMemory(budgetRequest(ck.Dir, opts)); err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	if opts.RAMBudget == 0 {
		if err := checkResidentFits(e.mem, opts.machineMemory); err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
	}
	// From here on the Go heap (and its garbage) must fit beside the
	// off-heap buffers about to be allocated.
	e.limit.set(e.mem.HeapLimit())
	log.Info("k3: memory plan", "plan", e.mem.String())
	e.pool = par.New(opts.Threads)
	mo := model.Options{Chunk: opts.PrefillChunk, Pool: e.pool, Alloc: e.alloc}
	if opts.RAMBudget > 0 {
		mo.Memory = e.mem
	}
	if e.m, err = model.Load(ctx, plan, e.read, mo); err != nil {
		return nil, fmt.Errorf("k3: loading %s: %w", ck.Dir, checkpointErr(err))
	}
	rs := e.reader.Stats()
	e.loadBytes, e.loadBusy = rs.BytesRead, rs.BusyTime
	return e, nil
}

// usePacked points the plan's trunk reads at a packed trunk (k3 pack). A
// compressed pack is used when mode says so, or in CompressionAuto when a
// sample of the trunk measured here says decoding beats the disk;
// otherwise the trunk is read from the checkpoint's shards.
func (e *engine) usePacked(ctx context.Context, plan *model.Plan, dir string, mode Compression, log *slog.Logger) error {
	x, err := model.ReadPackIndex(dir)
	if err != nil {
		return fmt.Errorf("k3: packed trunk %s: %w", dir, checkpointErr(err))
	}
	if x.Compressed {
		// Refuse another checkpoint's pack even when it will not be used.
		if fp, err := plan.Fingerprint(); err != nil || fp != x.Fingerprint {
			return fmt.Errorf("k3: packed trunk %s: %w: %w: it was packed from a checkpoint with other contents (fingerprint %s, this one %s)",
				dir, ErrBadCheckpoint, model.ErrPackMismatch, x.Fingerprint, fp)
		}
		use, err := e.decideCompression(ctx, plan, mode, log)
		if err != nil {
			return err
		}
		if !use {
			return nil
		}
	}
	f, err := iox.OpenFile(filepath.Join(dir, model.PackedDataFile), iox.FileOptions{Direct: true})
	if err != nil {
		return fmt.Errorf("k3: packed trunk: %w", err)
	}
	if err := e.addFile(f, filepath.Join(dir, model.PackedDataFile)); err != nil {
		return err
	}
	if err := plan.UsePacked(x, len(e.files)-1, f.Size()); err != nil {
		return fmt.Errorf("k3: packed trunk %s: %w: %w", dir, ErrBadCheckpoint, err)
	}
	return nil
}

// decideCompression says whether to read the trunk from a compressed pack.
func (e *engine) decideCompression(ctx context.Context, plan *model.Plan, mode Compression, log *slog.Logger) (bool, error) {
	switch mode {
	case CompressionOn:
		log.Info("k3: trunk: compressed pack (TrunkCompression on)")
		return true, nil
	case CompressionOff:
		log.Info("k3: trunk: compressed pack not used (TrunkCompression off); reading the checkpoint's shards")
		return false, nil
	case CompressionAuto:
	default:
		return false, fmt.Errorf("k3: %w: TrunkCompression %d", ErrBadOptions, mode)
	}
	r, err := plan.MeasureCompression(ctx, e.read, e.alloc, true)
	if err != nil {
		return false, fmt.Errorf("k3: %w", err)
	}
	if r.Pays {
		log.Info("k3: trunk: compressed pack chosen", "report", r.String())
	} else {
		log.Info("k3: trunk: compressed pack not used, reading the checkpoint's shards", "report", r.String())
	}
	return r.Pays, nil
}

// pathCheckInterval is how often checkFiles looks for replaced files.
const pathCheckInterval = time.Second

// addFile records an opened file and its identity on disk.
func (e *engine) addFile(f *iox.File, path string) error {
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
// past the end. The open descriptors are checked before every forward
// pass (fstat, no allocation); the paths, for a file replaced by another
// (whose old bytes the engine still reads consistently meanwhile), at most
// once per pathCheckInterval.
func (e *engine) checkFiles() error {
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
func (e *engine) failFiles(err error) { e.filesErr.CompareAndSwap(nil, &err) }

func (e *engine) checkFilesNow() error {
	for _, f := range e.files {
		if err := f.Unchanged(); err != nil {
			return fmt.Errorf("k3: %w: %w", ErrBadCheckpoint, err)
		}
	}
	now := time.Now().UnixNano()
	if last := e.pathChecked.Load(); now-last < int64(pathCheckInterval) || !e.pathChecked.CompareAndSwap(last, now) {
		return nil
	}
	for i := range e.files {
		st, err := os.Stat(e.paths[i])
		if err != nil {
			return fmt.Errorf("k3: %w: %s: %w", ErrBadCheckpoint, e.paths[i], err)
		}
		if !os.SameFile(st, e.stats[i]) {
			return fmt.Errorf("k3: %w: %s was replaced on disk since it was opened", ErrBadCheckpoint, e.paths[i])
		}
	}
	return nil
}

// read performs one extent read through the direct-I/O reader and returns
// only when no read will write into buf any more, so the buffer may be
// reused or freed.
func (e *engine) read(ctx context.Context, x model.Extent, buf []byte) error {
	_, w := x.Window()
	f := e.reader.Submit(ctx, iox.Request{Src: e.srcs[x.File], Off: x.Off, Len: int(x.Size), Dst: buf[x.Region : x.Region+w]})
	_, err := f.Wait()
	<-f.Released()
	if errors.Is(err, iox.ErrFileChanged) {
		err = fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	return err
}

// alloc returns an aligned, off-heap buffer backed by huge pages where the
// kernel allows, pre-faulted so that direct reads run at full speed and the
// memory shows in RSS at once.
func (e *engine) alloc(n int64) ([]byte, error) {
	// Huge pages only where their 2 MiB rounding is small; the plan counts
	// it (model.BufferBytes).
	b, err := iox.AllocAligned(int(n), iox.BufferOptions{HugePages: n >= model.HugeBufferMin, Populate: true})
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	e.mu.Lock()
	e.bufs = append(e.bufs, b)
	e.mu.Unlock()
	return b.Bytes(), nil
}

// close releases everything in dependency order: the model (which waits
// for its reads), the reader, the files, the buffers.
func (e *engine) close() error {
	var errs []error
	if e.m != nil {
		e.m.Close()
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
	e.limit.release()
	errs = append(errs, e.ck.Close())
	return errors.Join(errs...)
}
