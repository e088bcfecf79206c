package model

import (
	"fmt"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/iox"
)

// A cluster of ranks runs one model: rank 0 (the process that serves
// requests) holds every sequence's MLA cache and computes everything but
// the products of weight matrices and the KDA heads, and every rank, rank
// 0 included, holds a slice of the rows of every matrix (RowRange: the
// trunk's, the routed experts', the output head's; the KDA matrices in
// whole heads, SplitUnit) and computes whole dot products for its rows.
// The slices put together are the product of the whole matrix, bit for
// bit: no sum is ever split, so the logits are the same at every rank
// count. Each rank also runs its KDA heads of every sequence on its own
// heads of the sequence's state (heads.go). The matrices rank 0 keeps
// whole are MLA's kv_b (its attention reads it per head) and, like every
// rank, the KDA decay's first projection; the embeddings, norms and
// vectors are rank 0's too.

// RowRange is expert.RowRange: rank's rows [lo, hi) of a matrix of rows
// rows split over ranks ranks.
func RowRange(rows, rank, ranks int) (lo, hi int) { return expert.RowRange(rows, rank, ranks) }

// rankZeroOnly reports whether rank 0 keeps matrix id whole instead of
// splitting it.
func rankZeroOnly(id MatID) bool { return id == MatKVBProj }

// everyRank reports whether every rank holds matrix id whole: the KDA
// decay's first projection (KDAHeadDim rows), whose output every rank's
// heads of the second read in full.
func everyRank(id MatID) bool { return id == MatFAProj }

// SplitUnit returns the rows of matrix id (rows rows) that ranks take
// whole (Product.Unit): a KDA head's KDAHeadDim rows of q, k, v, the
// output gate and the decay's second projection, so that every head is
// one rank's (β has a row per head, unit 1); all of the decay's first
// projection, which every rank holds and rank 0 computes in rounds; 1
// (rows) for the rest.
func SplitUnit(c *Config, id MatID, rows int) int {
	switch id {
	case MatQProj, MatKProj, MatVProj, MatGProj, MatFBProj:
		return c.KDAHeadDim
	case MatFAProj:
		return rows
	}
	return 1
}

// matRows returns the rows [lo, hi) of matrix id (rows rows) that rank of
// ranks holds.
func matRows(c *Config, id MatID, rows, rank, ranks int) (lo, hi int) {
	switch {
	case rankZeroOnly(id):
		if rank != 0 {
			return 0, 0
		}
		return 0, rows
	case everyRank(id):
		return 0, rows
	}
	return UnitRange(rows, SplitUnit(c, id, rows), rank, ranks)
}

// Rank returns the plan's rank and the cluster's size (0, 1 for a plan of
// the whole model).
func (p *Plan) Rank() (rank, ranks int) { return p.rank, max(p.ranks, 1) }

// Shard returns the plan of rank rank of a cluster of ranks ranks: every
// split matrix of every layer part holds the rank's rows only (its image
// is read with one request per matrix slice), rank 0 also holds kv_b
// whole, the output head holds the rank's vocabulary rows, and the routed
// experts are the rank's halves (expert.Index.Shard). Vectors stay
// (rank 0 uses them); a rank other than 0 never reads the embeddings.
func (p *Plan) Shard(rank, ranks int) (*Plan, error) {
	if ranks < 1 || rank < 0 || rank >= ranks {
		return nil, fmt.Errorf("model: rank %d of a cluster of %d", rank, ranks)
	}
	if p.ranks > 1 {
		return nil, fmt.Errorf("model: the plan is already rank %d of %d", p.rank, p.ranks)
	}
	if ranks == 1 {
		return p, nil // the whole model
	}
	q := *p
	q.rank, q.ranks = rank, ranks
	q.parts = make([]PartLayout, len(p.parts))
	for u := range p.parts {
		src := &p.parts[u]
		dst := &q.parts[u]
		dst.Layer, dst.Part = src.Layer, src.Part
		var locs []iox.Entry
		var ms []PartTensor
		for _, t := range src.Tensors {
			e, ok := p.Ckpt.Lookup(t.Name)
			if !ok {
				return nil, fmt.Errorf("%w: tensor %s is missing", ErrBadCheckpoint, t.Name)
			}
			lo, hi := matRows(p.Cfg, t.Mat, t.Rows, rank, ranks)
			if hi == lo {
				continue
			}
			ms = append(ms, PartTensor{Name: t.Name, Rows: hi - lo, Cols: t.Cols, DType: t.DType, Mat: t.Mat})
			locs = append(locs, rowSlice(e, lo, hi))
		}
		exts, offs, total := planExtents(locs, 64<<10)
		for i := range ms {
			ms[i].Off = offs[i]
			dst.Payload += int64(ms[i].Rows * ms[i].Cols * ms[i].DType.Size())
		}
		dst.Tensors, dst.Extents, dst.Bytes = ms, exts, total
	}
	lo, hi := RowRange(p.Cfg.Vocab, rank, ranks)
	q.lmHead = rowSlice(p.lmHead, lo, hi)
	x, err := p.experts.Shard(rank, ranks)
	if err != nil {
		return nil, err
	}
	q.experts = x
	return &q, nil
}

// rowSlice is rows [lo, hi) of a row-major matrix entry.
func rowSlice(e iox.Entry, lo, hi int) iox.Entry {
	rows := e.Shape[0]
	rowBytes := e.Size / int64(max(rows, 1))
	s := e
	s.Shape = []int{hi - lo, e.Shape[1]}
	s.Offset += int64(lo) * rowBytes
	s.Size = int64(hi-lo) * rowBytes
	return s
}

// RankRanges returns the byte ranges of the checkpoint's files (by shard
// index) that rank of a cluster of ranks reads: its rows of every split
// matrix of every layer part, of the output head and of every routed
// expert's halves; the embeddings, when rank is 0; and every other tensor
// whole (the norms and vectors every rank's plan reads, and anything else
// the files hold). With ranks 1, every tensor. The ranges may overlap and
// come in no order.
func (p *Plan) RankRanges(rank, ranks int) ([][][2]int64, error) {
	if p.ranks > 1 {
		return nil, fmt.Errorf("model: the plan is already rank %d of %d", p.rank, p.ranks)
	}
	q, err := p.Shard(rank, ranks)
	if err != nil {
		return nil, err
	}
	out := make([][][2]int64, len(p.Ckpt.Shards))
	add := func(file int, off, size int64) {
		if size > 0 && file >= 0 && file < len(out) {
			out[file] = append(out[file], [2]int64{off, size})
		}
	}
	split := map[string]bool{p.embed.Name: true, p.lmHead.Name: true}
	for u := range p.parts {
		for _, t := range p.parts[u].Tensors {
			split[t.Name] = true
		}
	}
	for u := range q.parts {
		for _, e := range q.parts[u].Extents {
			add(e.File, e.Off, e.Size)
		}
	}
	add(q.lmHead.Shard, q.lmHead.Offset, q.lmHead.Size)
	if rank == 0 {
		add(p.embed.Shard, p.embed.Offset, p.embed.Size)
	}
	if q.experts != nil {
		q.experts.Ranges(add)
	}
	for _, name := range p.Ckpt.Names() {
		if split[name] || expert.IsTensor(name) {
			continue
		}
		e, _ := p.Ckpt.Lookup(name)
		add(e.Shard, e.Offset, e.Size)
	}
	return out, nil
}
