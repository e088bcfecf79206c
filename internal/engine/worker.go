package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/internal/engine/cluster/link"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/prefix"
	"github.com/k3go/k3/internal/engine/trunk"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// WorkerOptions configure a rank other than 0 of a cluster (k3 worker).
type WorkerOptions struct {
	// RAMBudget bounds the process's peak resident set (0: everything
	// resident); Threads the kernels' threads; IOQueueDepth the reads in
	// flight.
	RAMBudget             int64
	Threads, IOQueueDepth int
	// Rank and Ranks, when set, load that rank's slice at once (a
	// StatefulSet knows its ordinal) and refuse a rank 0 that expects
	// another; zero learns them from the first rank 0 that connects.
	Rank, Ranks int
	// Sessions is rank 0's sequences at once (0: 1), whose KDA heads the
	// budget holds; Speculate the most drafts rank 0 verifies a pass (0:
	// none), whose copies and records of its heads the budget holds too.
	Sessions, Speculate int
	// Prefix keeps the worker's slices of rank 0's prefix-cache entries
	// (its KDA heads of each state entry): RAMBytes (0: two slices per
	// session; negative: none), Dir and DiskBytes as in PrefixOptions.
	// Nil: the RAM tier's default, no disk tier. BlockTokens and
	// CheckpointBlocks are rank 0's.
	Prefix *PrefixOptions
	// Key, TLS, Timeout and Version are the links' (ClusterOptions).
	Version string
	Key     []byte
	TLS     *tls.Config
	Timeout time.Duration
	Logger  *slog.Logger
	// WrapSource, if set, wraps every file the worker reads (tests).
	WrapSource func(path string, f *iox.File) iox.Source
}

// Worker is a rank other than 0: it holds its rows of every weight matrix
// of a checkpoint, pinned where its budget allows and streamed from its
// own disk where it does not, and answers rank 0's rounds with its rows of
// every product. It serves one rank 0 at a time; a rank 0 that connects
// while another is served replaces it (the old one failed or restarted).
type Worker struct {
	e     *Engine // the checkpoint, files, reader and buffers
	whole *model.Plan
	fp    string
	opts  WorkerOptions

	mu    sync.Mutex // the loaded rank, and the connection served
	rank  int
	ranks int
	srv   *model.Server
	heads *headCache         // its slices of rank 0's prefix-cache entries
	serve context.CancelFunc // ends the connection being served
	done  chan struct{}      // closed when it has ended
}

// OpenWorker opens the checkpoint in dir for a worker (its fingerprint is
// computed now: the handshake compares it with rank 0's) and, with
// opts.Rank set, loads that rank's slice.
func OpenWorker(ctx context.Context, dir string, cfg *model.Config, opts WorkerOptions) (_ *Worker, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Rank != 0 || opts.Ranks != 0 {
		if opts.Ranks < 2 || opts.Rank < 1 || opts.Rank >= opts.Ranks {
			return nil, fmt.Errorf("k3: worker: %w: rank %d of %d ranks (a worker is rank 1..N-1 of N >= 2)", ErrBadOptions, opts.Rank, opts.Ranks)
		}
	}
	if len(opts.Key) == 0 {
		return nil, fmt.Errorf("k3: worker: %w: a cluster needs a shared key", ErrBadOptions)
	}
	debug.FreeOSMemory()
	e := &Engine{opts: Options{RAMBudget: opts.RAMBudget, Threads: opts.Threads, IOQueueDepth: opts.IOQueueDepth}, log: log, wrapSource: opts.WrapSource}
	if opts.RAMBudget > 0 {
		e.limit = planner.ClaimMemoryLimit(opts.RAMBudget - rss.ExecutableBytes())
	}
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	if e.ck, err = iox.OpenCheckpointContext(ctx, dir); err != nil {
		return nil, fmt.Errorf("k3: worker: %w", CheckpointErr(err))
	}
	plan, err := model.NewPlan(cfg, e.ck)
	if err != nil {
		return nil, fmt.Errorf("k3: worker: %s: %w", dir, CheckpointErr(err))
	}
	for _, sh := range e.ck.Shards {
		f, err := iox.OpenFile(sh.Path, iox.FileOptions{Direct: true})
		if err != nil {
			return nil, fmt.Errorf("k3: worker: %w", err)
		}
		if err := e.addFile(f, sh.Path); err != nil {
			return nil, err
		}
	}
	fp, err := plan.Ckpt.Fingerprint()
	if err != nil {
		return nil, fmt.Errorf("k3: worker: %w", err)
	}
	if e.reader, err = iox.NewReader(iox.ReaderOptions{QueueDepth: opts.IOQueueDepth}); err != nil {
		return nil, fmt.Errorf("k3: worker: %w", err)
	}
	e.pool = par.New(opts.Threads)
	w := &Worker{e: e, whole: plan, fp: fp, opts: opts, heads: &headCache{log: log, fp: fp, alloc: offHeap}}
	if p := opts.Prefix; p != nil && p.DiskBytes >= 0 {
		w.heads.dir, w.heads.disk = p.Dir, p.DiskBytes
		if w.heads.disk == 0 {
			w.heads.disk = DefaultPrefixDiskBytes
		}
		if w.heads.dir == "" {
			if w.heads.dir, err = prefix.DefaultDir(); err != nil {
				log.Warn("k3: worker: prefix cache: no user cache directory; the cache keeps to RAM", "err", err)
			}
		}
	}
	if opts.Rank != 0 {
		if err := w.load(ctx, opts.Rank, opts.Ranks); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Fingerprint returns the checkpoint's content fingerprint.
func (w *Worker) Fingerprint() string { return w.fp }

// load makes the worker hold rank's slice of a cluster of ranks, giving
// back another rank's first. w.mu is held.
func (w *Worker) load(ctx context.Context, rank, ranks int) error {
	if w.rank == rank && w.ranks == ranks && w.srv != nil {
		return nil
	}
	w.unload()
	e := w.e
	if err := checkSlice(e.ck.Dir, rank, ranks); err != nil {
		return err
	}
	plan, err := w.whole.Shard(rank, ranks)
	if err != nil {
		return err
	}
	lay := trunk.NewLayout(plan)
	var asked int64
	if w.opts.Prefix != nil {
		asked = w.opts.Prefix.RAMBytes
	}
	w.heads.ram = headCacheRAM(w.whole.Cfg, ranks, w.opts.Sessions, asked)
	req := workerRequest(e.opts.RAMBudget, e.opts.Threads, e.opts.IOQueueDepth, ranks, w.opts.Sessions, w.opts.Speculate, w.heads.ram) // as Inspection.WorkerRequest
	if e.mem, err = planner.Plan(lay.Weights(), req); err != nil {
		return fmt.Errorf("k3: worker rank %d of %d: %w", rank, ranks, err)
	}
	e.limit.Set(e.mem.HeapLimit())
	e.log.Info("k3: worker: memory plan", "rank", rank, "ranks", ranks, "plan", e.mem.String())
	if e.trunk, err = trunk.New(ctx, lay, e.mem, e.read, e.alloc); err != nil {
		return fmt.Errorf("k3: worker rank %d: %w", rank, CheckpointErr(err))
	}
	mo := model.Options{Pool: e.pool, Alloc: e.alloc, Layers: e.trunk}
	if e.opts.RAMBudget > 0 {
		arena, err := e.alloc(int64(e.mem.CacheSlots) * e.mem.CacheSlotBytes)
		if err != nil {
			return fmt.Errorf("k3: worker: expert cache: %w", err)
		}
		if e.xs, err = expert.NewStream(plan.Experts(), plan.Cfg.TopK, e.mem.CacheSlots, arena, e.read, 0); err != nil {
			return err
		}
		mo.Experts = e.xs
	}
	if e.m, err = model.Load(ctx, plan, e.read, mo); err != nil {
		return fmt.Errorf("k3: worker rank %d: %w", rank, CheckpointErr(err))
	}
	w.rank, w.ranks, w.srv = rank, ranks, e.m.NewServer()
	e.log.Info("k3: worker: loaded", "rank", rank, "ranks", ranks)
	return nil
}

// unload gives back the loaded slice. w.mu is held.
func (w *Worker) unload() {
	e := w.e
	if e.m != nil {
		e.m.Close()
		e.m = nil
	}
	if e.trunk != nil {
		e.trunk.Close()
		e.trunk = nil
	}
	if e.xs != nil {
		e.xs.Close()
		e.xs = nil
	}
	e.mu.Lock()
	for _, b := range e.bufs {
		b.Free()
	}
	e.bufs = nil
	e.mu.Unlock()
	w.heads.close() // its RAM tier is the plan's
	w.srv, w.rank, w.ranks = nil, 0, 0
	debug.FreeOSMemory()
}

// self is the Hello the worker states: its rank once known.
func (w *Worker) self() link.Hello {
	return link.Hello{Version: cluster.HelloVersion(w.opts.Version), Fingerprint: w.fp, Kernels: Kernels(), Ranks: w.opts.Ranks, Rank: w.opts.Rank}
}

// ListenAndServe listens on addr (and nowhere else) and serves the rank 0
// that connects, one at a time, until ctx ends.
func (w *Worker) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	cfg := link.Config{Key: w.opts.Key, TLS: w.opts.TLS, Timeout: w.opts.Timeout}
	l, err := link.Listen(addr, cfg)
	if err != nil {
		return fmt.Errorf("k3: worker: %w", err)
	}
	defer l.Close()
	if ready != nil {
		ready(l.Addr())
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		conn, peer, err := l.Accept(ctx, w.self())
		if err != nil {
			if ctx.Err() != nil {
				w.endServing()
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			lvl := slog.LevelWarn
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				lvl = slog.LevelDebug // a probe that only opens the port
			}
			w.e.log.Log(ctx, lvl, "k3: worker: a connection was refused", "err", err)
			continue
		}
		w.e.log.Info("k3: worker: rank 0 connected", "peer", conn.Peer(), "rank", peer.Rank, "ranks", peer.Ranks)
		w.endServing() // a new rank 0 replaces the old one
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		w.mu.Lock()
		w.serve, w.done = cancel, done
		w.mu.Unlock()
		go func() {
			defer close(done)
			defer cancel()
			err := w.serveConn(sctx, conn, peer)
			if err != nil && sctx.Err() == nil {
				w.e.log.Warn("k3: worker: rank 0 left", "peer", conn.Peer(), "err", err)
			}
		}()
	}
}

// endServing ends the connection being served, if any, and waits for it.
func (w *Worker) endServing() {
	w.mu.Lock()
	cancel, done := w.serve, w.done
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// serveConn loads the slice rank 0 asks for and answers its rounds.
func (w *Worker) serveConn(ctx context.Context, conn *link.Conn, peer link.Hello) error {
	defer conn.Close()
	w.mu.Lock()
	err := w.load(ctx, peer.Rank, peer.Ranks)
	srv := workerServer{Server: w.srv, hc: w.heads, rank: w.rank, ranks: w.ranks}
	w.mu.Unlock()
	if err := cluster.Ready(conn, err); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	return cluster.Serve(ctx, idleConn{conn}, srv)
}

// idleConn waits for rank 0's next round without a deadline (rank 0 may
// be idle for hours); sends keep the link's timeout.
type idleConn struct{ *link.Conn }

func (c idleConn) Recv(dst []byte) (uint8, []byte, error) { return c.Conn.Await(dst) }

// Close ends serving and gives back everything.
func (w *Worker) Close() error {
	w.endServing()
	w.mu.Lock()
	w.unload()
	w.mu.Unlock()
	return w.e.release()
}
