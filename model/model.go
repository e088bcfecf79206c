package model

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/tensor"
)

// ErrTokenOutOfRange reports a token id outside [0, vocab).
var ErrTokenOutOfRange = errors.New("token id out of range")

// ErrClosed reports a forward pass stopped because its Model was closed
// (the root package also uses it for a closed session, hence the text).
var ErrClosed = errors.New("closed")

// Options configure a Model's compute.
type Options struct {
	// Pool runs the kernels' row blocks. Nil means a pool of GOMAXPROCS
	// goroutines owned by the Model.
	Pool *par.Pool
	// Chunk is the number of tokens that share one pass over the weights
	// during prefill. It changes speed and scratch memory, never results.
	// Zero means 64.
	Chunk int
	// Layers and Experts provide the weights. A nil Layers means: build a
	// Trunk from Memory (pinned parts plus a streaming ring), or read
	// every part into memory when Memory is nil. A nil Experts means: read
	// every expert into memory.
	Layers  LayerSource
	Experts ExpertSource
	// Memory is the memory plan for the trunk; Alloc provides its buffers
	// (nil: the Go heap).
	Memory *MemoryPlan
	Alloc  Alloc
	// ExpertWindow is the number of expert reads a pass keeps in flight
	// (zero: top-k).
	ExpertWindow int
}

// Model is a loaded Kimi K3: its plan, its weight sources and its worker
// pool. It is safe for concurrent use by several States.
type Model struct {
	Cfg        *Config
	Plan       *Plan
	layers     LayerSource
	experts    ExpertSource
	embed      tensor.Mat // Data is nil when rows are read per token
	embedRead  ReadFunc
	embedEntry iox.Entry
	lmHead     tensor.Mat
	pool       *par.Pool
	ownPool    bool
	chunk      int
	closed     atomic.Bool

	forwardNanos atomic.Int64
	waitNanos    atomic.Int64 // expert waits (the trunk counts its own)

	passes, rows                atomic.Int64
	expertUnion, moeLayerPasses atomic.Int64
}

// Stats are a Model's cumulative counters.
type Stats struct {
	TrunkBytesRead, ExpertBytesRead int64
	CacheHits, CacheMisses          int64
	// TrunkDecodedBytes and TrunkDecodeTime are the streamed parts
	// decoded from a compressed pack and the core time it took (summed
	// over blocks, so bytes/time is the rate per core).
	TrunkDecodedBytes     int64
	TrunkDecodeTime       time.Duration
	ForwardTime, WaitTime time.Duration
	// Passes and Rows count forward passes and the token rows they
	// carried; ExpertUnion sums the distinct experts of every MoE layer
	// of every pass, MoELayerPasses counts those layer executions.
	Passes, Rows                int64
	ExpertUnion, MoELayerPasses int64
}

// ExpertStats is implemented by expert sources that count their work.
type ExpertStats interface {
	ExpertStats() (bytesRead, hits, misses int64, wait time.Duration)
}

// Stats returns the counters since Load.
func (m *Model) Stats() Stats {
	s := Stats{ForwardTime: time.Duration(m.forwardNanos.Load()), WaitTime: time.Duration(m.waitNanos.Load()),
		Passes: m.passes.Load(), Rows: m.rows.Load(), ExpertUnion: m.expertUnion.Load(), MoELayerPasses: m.moeLayerPasses.Load()}
	if t := m.Trunk(); t != nil {
		ts := t.Stats()
		s.TrunkBytesRead = ts.StreamedBytes
		s.TrunkDecodedBytes, s.TrunkDecodeTime = ts.DecodedBytes, ts.DecodeTime
		s.WaitTime += ts.WaitTime
	}
	if es, ok := m.experts.(ExpertStats); ok {
		b, h, mi, w := es.ExpertStats()
		s.ExpertBytesRead, s.CacheHits, s.CacheMisses = b, h, mi
		s.WaitTime += w
	}
	return s
}

// singleExtent lays out one file range alone in a buffer.
func singleExtent(file int, off, size int64) (Extent, int64) {
	return iox.SingleExtent(file, off, size)
}

// Load builds a Model from a checked plan. Weights come from opts.Layers
// and opts.Experts when given; otherwise every weight is read into memory
// through read.
func Load(ctx context.Context, p *Plan, read ReadFunc, opts Options) (*Model, error) {
	m := &Model{Cfg: p.Cfg, Plan: p, layers: opts.Layers, experts: opts.Experts, pool: opts.Pool, chunk: opts.Chunk}
	if m.chunk <= 0 {
		m.chunk = 64
	}
	var err error
	if opts.Memory == nil || opts.Memory.EmbedResident {
		if m.embed, err = readMat(ctx, p, read, p.embed.Name); err != nil {
			return nil, err
		}
	} else {
		// Embedding rows are read per token: 14 KB each on Kimi K3,
		// instead of 2.35 GB resident.
		e := p.embed
		m.embed = tensor.Mat{DType: e.DType, Rows: e.Shape[0], Cols: e.Shape[1]}
		m.embedRead, m.embedEntry = read, e
	}
	if m.lmHead, err = readMat(ctx, p, read, p.lmHead.Name); err != nil {
		return nil, err
	}
	alloc := opts.Alloc
	if alloc == nil {
		alloc = func(n int64) ([]byte, error) { return make([]byte, n), nil }
	}
	if m.layers == nil && opts.Memory != nil {
		t, err := NewTrunk(ctx, p, opts.Memory, read, alloc)
		if err != nil {
			return nil, err
		}
		m.layers = t
	}
	if m.layers == nil {
		if m.layers, err = loadResidentLayers(ctx, p, read, alloc); err != nil {
			return nil, err
		}
	}
	if m.experts == nil && opts.Memory != nil {
		slots := opts.Memory.CacheSlots
		arena, err := alloc(int64(slots) * opts.Memory.CacheSlotBytes)
		if err != nil {
			return nil, fmt.Errorf("expert cache: %w", err)
		}
		se, err := NewStreamExperts(p, slots, arena, read, opts.ExpertWindow)
		if err != nil {
			return nil, err
		}
		m.experts = se
	}
	if m.experts == nil {
		if m.experts, err = loadResidentExperts(ctx, p, read, alloc); err != nil {
			return nil, err
		}
	}
	if m.pool == nil {
		m.pool, m.ownPool = par.New(0), true
	}
	return m, nil
}

func readMat(ctx context.Context, p *Plan, read ReadFunc, name string) (tensor.Mat, error) {
	e, _ := p.Ckpt.Lookup(name)
	x, n := singleExtent(e.Shard, e.Offset, e.Size)
	buf := make([]byte, n)
	if err := read(ctx, x, buf); err != nil {
		return tensor.Mat{}, fmt.Errorf("%s: %w", name, err)
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
	return tensor.Widen(dst, buf[x.BufOff:x.BufOff+rb], m.embed.DType)
}

// Close releases the Model's worker pool if it owns it. Call Interrupt and
// wait for running passes first.
func (m *Model) Close() {
	m.closed.Store(true)
	if t, ok := m.layers.(*Trunk); ok {
		t.Close()
	}
	if se, ok := m.experts.(*StreamExperts); ok {
		se.Close()
	}
	if m.ownPool {
		m.pool.Close()
	}
}

// Trunk returns the streaming trunk, or nil when the layers are resident
// or provided by the caller.
func (m *Model) Trunk() *Trunk {
	t, _ := m.layers.(*Trunk)
	return t
}

// Pool returns the worker pool the kernels run on.
func (m *Model) Pool() *par.Pool { return m.pool }
