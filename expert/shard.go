package expert

import (
	"fmt"
	"strings"

	"github.com/k3go/k3/iox"
)

// RowRange returns the rows [lo, hi) of a matrix of rows rows that rank
// rank of a cluster of ranks ranks holds: contiguous slices whose sizes
// differ by at most one row, the larger ones first. Every rank computes
// whole dot products for its rows, so the slices put together are the
// product of the whole matrix, bit for bit.
func RowRange(rows, rank, ranks int) (lo, hi int) {
	q, r := rows/ranks, rows%ranks
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}

// Halves of a routed expert in a sharded index: a rank's rows of w1 and
// w3 (the gate and up matrices, which a row of the expert's input needs
// first) and its rows of w2 (the down matrix, which needs every rank's
// gate and up rows first). Half h of expert e is id 2e+h.
const (
	HalfUp   = 0 // w1 and w3: Layout[0] and Layout[2] bound, Layout[1] empty
	HalfDown = 1 // w2: Layout[1] bound
)

// Shard returns the index of rank rank's share of every routed expert in
// a cluster of ranks ranks: its rows (RowRange) of w1 and w3 as half
// HalfUp, of w2 as half HalfDown, each half an expert of the returned index
// (id 2e+h, so layer l has 2·Experts(l) of them), read with one request
// per matrix slice (packed bytes and scales apart). A rank reads, caches
// and multiplies only its rows, and the two halves of an expert are used
// one after the other (every rank's gate and up rows come before any down
// row), so each is read once per use.
func (x *Index) Shard(rank, ranks int) (*Index, error) {
	if ranks < 1 || rank < 0 || rank >= ranks {
		return nil, fmt.Errorf("expert index: rank %d of %d", rank, ranks)
	}
	out := &Index{locs: make([][]Loc, len(x.locs))}
	for l, locs := range x.locs {
		if locs == nil {
			continue
		}
		out.locs[l] = make([]Loc, 2*len(locs))
		for e := range locs {
			for h := HalfUp; h <= HalfDown; h++ {
				loc, err := x.half(l, e, h, rank, ranks)
				if err != nil {
					return nil, err
				}
				out.locs[l][2*e+h] = loc
				out.runBytes = max(out.runBytes, loc.Size)
				out.slot = max(out.slot, loc.bufferBytes())
			}
		}
	}
	return out, nil
}

// half builds the several-request location of one half of expert e of
// layer l for rank.
func (x *Index) half(l, e, h, rank, ranks int) (Loc, error) {
	src := x.Layout(l, e)
	var ents []iox.Entry
	var lay Layout
	ws := []int{0, 2} // w1, w3
	if h == HalfDown {
		ws = []int{1}
	}
	for _, w := range ws {
		m := src[w]
		lo, hi := RowRange(m.Rows, rank, ranks)
		sl := MatrixLayout{MX: m.MX, DType: m.DType, Rows: hi - lo, Cols: m.Cols}
		file, off, err := x.fileOffset(l, e, m.Off)
		if err != nil {
			return Loc{}, err
		}
		if hi == lo {
			continue // this rank holds none of its rows
		}
		rowBytes := m.Size / int64(max(m.Rows, 1))
		ents = append(ents, sliceEntry(file, off, lo, hi, rowBytes))
		sl.Size = int64(hi-lo) * rowBytes
		if m.MX {
			file, off, err := x.fileOffset(l, e, m.ScaleOff)
			if err != nil {
				return Loc{}, err
			}
			scaleRow := m.ScaleSize / int64(max(m.Rows, 1))
			ents = append(ents, sliceEntry(file, off, lo, hi, scaleRow))
			sl.ScaleSize = int64(hi-lo) * scaleRow
		}
		lay[w] = sl
	}
	if len(ents) == 0 {
		return Loc{irr: &irregular{layout: lay}}, nil
	}
	// Matrices of the other half stay empty (zero rows); irregularLoc
	// assigns offsets to the bound ones in entry order.
	exts, offs, total := iox.PlanExtents(ents, 0)
	k := 0
	var size int64
	for _, w := range ws {
		if lay[w].Rows == 0 {
			continue
		}
		lay[w].Off = offs[k]
		k++
		if lay[w].MX {
			lay[w].ScaleOff = offs[k]
			k++
		}
	}
	for _, en := range ents {
		size += en.Size
	}
	return Loc{File: ents[0].Shard, Off: ents[0].Offset, Size: size, irr: &irregular{extents: exts, bytes: total, layout: lay}}, nil
}

// sliceEntry is rows [lo, hi) of a row-major tensor at off in file.
func sliceEntry(file int, off int64, lo, hi int, rowBytes int64) iox.Entry {
	return iox.Entry{Shard: file, TensorInfo: iox.TensorInfo{Offset: off + int64(lo)*rowBytes, Size: int64(hi-lo) * rowBytes}}
}

// fileOffset returns where byte off of expert e's payload (as its Layout
// places it) lies in the checkpoint.
func (x *Index) fileOffset(l, e int, off int64) (int, int64, error) {
	loc := x.locs[l][e]
	if loc.irr == nil {
		return loc.File, loc.Off + off, nil
	}
	for _, ext := range loc.irr.extents {
		if off >= ext.BufOff && off < ext.BufOff+ext.Size {
			return ext.File, ext.Off + (off - ext.BufOff), nil
		}
	}
	return 0, 0, fmt.Errorf("%w: layer %d expert %d: byte %d of its payload is in no extent", ErrLayout, l, e, off)
}

// Ranges calls fn with every byte range of the checkpoint's files that
// the index reads: each expert's run, or each extent of one read in
// several requests (a sharded index: each half's row slices).
func (x *Index) Ranges(fn func(file int, off, size int64)) {
	for _, locs := range x.locs {
		for _, loc := range locs {
			if loc.irr == nil {
				if loc.Size > 0 {
					fn(loc.File, loc.Off, loc.Size)
				}
				continue
			}
			for _, ext := range loc.irr.extents {
				fn(ext.File, ext.Off, ext.Size)
			}
		}
	}
}

// IsTensor reports whether name is a routed expert's tensor (Name's
// pattern).
func IsTensor(name string) bool { return strings.Contains(name, ".block_sparse_moe.experts.") }
