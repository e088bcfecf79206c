package iox

import (
	"context"
	"sort"
)

// Extent is one contiguous byte range of a stored file that is read with a
// single request. In a buffer, the range's bytes start at BufOff; the read
// window [Off &^ (Align-1), roundup(Off+Size, Align)) lands at Region, so
// BufOff = Region + Off%Align.
type Extent struct {
	File   int // shard index
	Off    int64
	Size   int64
	Region int64
	BufOff int64
}

// Window returns the aligned file range that covers the extent.
func (e Extent) Window() (off, size int64) {
	start := e.Off &^ (Align - 1)
	end := (e.Off + e.Size + Align - 1) &^ (Align - 1)
	return start, end - start
}

// PlanExtents groups tensor locations into extents (merging neighbours that
// are adjacent, or separated by at most maxGap bytes, in the same file) and
// assigns each an aligned buffer region. It returns the buffer offset of
// every input location and the total buffer size.
func PlanExtents(locs []Entry, maxGap int64) (exts []Extent, bufOff []int64, total int64) {
	order := make([]int, len(locs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := locs[order[a]], locs[order[b]]
		if x.Shard != y.Shard {
			return x.Shard < y.Shard
		}
		return x.Offset < y.Offset
	})
	bufOff = make([]int64, len(locs))
	owner := make([]int, len(locs))
	for _, i := range order {
		l := locs[i]
		if n := len(exts); n > 0 {
			last := &exts[n-1]
			if last.File == l.Shard && l.Offset >= last.Off && l.Offset <= last.Off+last.Size+maxGap {
				if end := l.Offset + l.Size; end > last.Off+last.Size {
					last.Size = end - last.Off
				}
				owner[i] = n - 1
				continue
			}
		}
		exts = append(exts, Extent{File: l.Shard, Off: l.Offset, Size: l.Size})
		owner[i] = len(exts) - 1
	}
	for k := range exts {
		_, wsize := exts[k].Window()
		exts[k].Region = total
		exts[k].BufOff = total + exts[k].Off%Align
		total += wsize
	}
	for i, l := range locs {
		e := exts[owner[i]]
		bufOff[i] = e.BufOff + (l.Offset - e.Off)
	}
	return exts, bufOff, total
}

// ReadFunc reads one extent into buf, a buffer laid out by PlanExtents (or
// SingleExtent): the extent's bytes must land at buf[e.BufOff :
// e.BufOff+e.Size]. A direct-I/O reader may fill the whole aligned window
// buf[e.Region : e.Region+w].
type ReadFunc func(ctx context.Context, e Extent, buf []byte) error

// SingleExtent lays out one file range alone in a buffer: the extent and
// the buffer size its aligned window needs.
func SingleExtent(file int, off, size int64) (Extent, int64) {
	e := Extent{File: file, Off: off, Size: size, Region: 0, BufOff: off % Align}
	_, w := e.Window()
	return e, w
}
