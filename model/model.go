package model

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/tensor"
)

// ErrTokenOutOfRange reports a token id outside [0, vocab).
var ErrTokenOutOfRange = errors.New("token id out of range")

// ErrClosed reports a forward pass stopped because its Model was closed
// (the root package also uses it for a closed session, hence the text).
var ErrClosed = errors.New("closed")

// Options configure a Model's compute and where its weights come from.
type Options struct {
	// Pool runs the kernels' row blocks. Nil means a pool of GOMAXPROCS
	// goroutines owned by the Model.
	Pool tensor.Runner
	// Chunk is the number of tokens that share one pass over the weights
	// during prefill (Session.Forward). It changes speed and scratch
	// memory, never results. Zero means 64.
	Chunk int
	// Layers and Experts provide the weights: the engine passes its
	// streaming trunk and expert stream. Nil reads every layer part, or
	// every routed expert, into memory through Load's read function.
	Layers  LayerSource
	Experts expert.Source
	// Alloc provides the buffers of weights Load reads (nil: the Go heap).
	Alloc Alloc
	// EmbedPerToken reads each token's embedding row from the checkpoint
	// when it is needed (14 KB on Kimi K3) instead of keeping the table
	// (2.35 GB) in memory.
	EmbedPerToken bool
	// Ranks are the other ranks of a cluster, for a plan of rank 0
	// (Plan.Shard): every product of a pass is split over them. A plan of
	// another rank runs no pass; it computes its rows of the rounds rank 0
	// sends (Model.Slices).
	Ranks Ranks
}

// Model is a loaded Kimi K3: its plan, its weight sources and its worker
// pool. It is safe for concurrent use by several States.
type Model struct {
	Cfg        *Config
	Plan       *Plan
	layers     LayerSource
	experts    expert.Source
	embed      tensor.Mat // Data is nil when rows are read per token
	embedRead  ReadFunc
	embedEntry iox.Entry
	lmHead     tensor.Mat
	pool       tensor.Runner
	ranks      Ranks     // nil in one process
	ownPool    *par.Pool // the pool Load made, closed by Close
	chunk      int
	closed     atomic.Bool

	forwardNanos atomic.Int64

	passes, rows                atomic.Int64
	expertUnion, moeLayerPasses atomic.Int64
	embedBytes                  atomic.Int64 // embedding rows read (EmbedPerToken)
}

// Stats are a Model's cumulative counters of its own work; the weight
// sources count their reads.
type Stats struct {
	ForwardTime time.Duration
	// Passes and Rows count forward passes and the token rows they
	// carried; ExpertUnion sums the distinct experts of every MoE layer
	// of every pass, MoELayerPasses counts those layer executions.
	Passes, Rows                int64
	ExpertUnion, MoELayerPasses int64
	// EmbedBytes counts the embedding rows read from the checkpoint
	// (EmbedPerToken): their bytes, without the reads' alignment.
	EmbedBytes int64
}

// Stats returns the counters since Load.
func (m *Model) Stats() Stats {
	return Stats{ForwardTime: time.Duration(m.forwardNanos.Load()),
		Passes: m.passes.Load(), Rows: m.rows.Load(), ExpertUnion: m.expertUnion.Load(), MoELayerPasses: m.moeLayerPasses.Load(),
		EmbedBytes: m.embedBytes.Load()}
}

// singleExtent lays out one file range alone in a buffer.
func singleExtent(file int, off, size int64) (Extent, int64) {
	return iox.SingleExtent(file, off, size)
}

// Load builds a Model from a checked plan: it reads the embeddings (unless
// EmbedPerToken), the output head, and whatever weights opts does not
// provide, through read.
func Load(ctx context.Context, p *Plan, read ReadFunc, opts Options) (*Model, error) {
	m := &Model{Cfg: p.Cfg, Plan: p, layers: opts.Layers, experts: opts.Experts, pool: opts.Pool, chunk: opts.Chunk}
	switch rank, ranks := p.Rank(); {
	case ranks > 1 && rank == 0 && (opts.Ranks == nil || opts.Ranks.Size() != ranks):
		return nil, errNoRanks
	case ranks > 1 && rank == 0:
		m.ranks = opts.Ranks
	case opts.Ranks != nil:
		return nil, fmt.Errorf("model: Options.Ranks given for a plan of rank %d of %d", rank, ranks)
	}
	if m.chunk <= 0 {
		m.chunk = 64
	}
	var err error
	switch {
	case p.rank != 0:
		// Only rank 0 embeds tokens.
	case !opts.EmbedPerToken:
		if m.embed, err = readMat(ctx, read, p.embed); err != nil {
			return nil, err
		}
	default:
		e := p.embed
		m.embed = tensor.Mat{DType: e.DType, Rows: e.Shape[0], Cols: e.Shape[1]}
		m.embedRead, m.embedEntry = read, e
	}
	if m.lmHead, err = readMat(ctx, read, p.lmHead); err != nil {
		return nil, err
	}
	alloc := opts.Alloc
	if alloc == nil {
		alloc = func(n int64) ([]byte, error) { return make([]byte, n), nil }
	}
	if m.layers == nil {
		if m.layers, err = loadResidentLayers(ctx, p, read, alloc); err != nil {
			return nil, err
		}
	}
	if m.experts == nil {
		if m.experts, err = expert.LoadResident(ctx, p.experts, read, alloc); err != nil {
			return nil, err
		}
	}
	if m.pool == nil {
		m.ownPool = par.New(0)
		m.pool = m.ownPool
	}
	return m, nil
}

func readMat(ctx context.Context, read ReadFunc, e iox.Entry) (tensor.Mat, error) {
	x, n := singleExtent(e.Shard, e.Offset, e.Size)
	buf := make([]byte, n)
	if err := read(ctx, x, buf); err != nil {
		return tensor.Mat{}, fmt.Errorf("%s: %w", e.Name, err)
	}
	return tensor.Mat{DType: e.DType, Rows: e.Shape[0], Cols: e.Shape[1], Data: buf[x.BufOff : x.BufOff+e.Size]}, nil
}

// Interrupt makes every running and future forward pass stop at the next
// layer boundary with ErrClosed. It is the first half of closing a Model
// while sessions still run.
func (m *Model) Interrupt() { m.closed.Store(true) }

// embedRow widens the embedding of token id into dst, reading the row from
// the checkpoint when the table is not resident. buf is scratch of at least
// the row's bytes plus two alignment windows.
func (m *Model) embedRow(ctx context.Context, dst []float32, id int, buf []byte) error {
	if m.embed.Data != nil {
		m.embed.Row(dst, id)
		return nil
	}
	rb := int64(m.embed.RowBytes())
	e := m.embedEntry
	x, n := singleExtent(e.Shard, e.Offset+int64(id)*rb, rb)
	if err := m.embedRead(ctx, x, buf[:n]); err != nil {
		return fmt.Errorf("embedding row %d: %w", id, err)
	}
	m.embedBytes.Add(rb)
	return tensor.Widen(dst, buf[x.BufOff:x.BufOff+rb], m.embed.DType)
}

// Close releases the Model's worker pool if it owns it. Call Interrupt and
// wait for running passes first; the weight sources are the caller's to
// close.
func (m *Model) Close() {
	m.closed.Store(true)
	if m.ownPool != nil {
		m.ownPool.Close()
	}
}
