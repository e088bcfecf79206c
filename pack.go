package k3

import (
	"context"

	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/trunk"
)

// PackOptions configure Pack.
type PackOptions struct {
	// Progress, if set, is called with the bytes written so far and the
	// total.
	Progress func(done, total int64)
	// Force replaces an existing packed trunk in the output directory.
	Force bool
	// Compress writes the trunk compressed: every part in blocks of 256
	// KiB that decode independently, the BF16 exponent bytes Huffman
	// coded and the sign and mantissa bits stored as they are, each block
	// with a CRC-32C. Decoding is exact. MeasureCompression says whether
	// it pays off on a machine.
	Compress bool
}

// Pack rewrites the dense (non-expert) weights of the checkpoint in dir
// into a packed trunk in out: trunk.bin, every layer part at an aligned
// offset as the exact image of its buffer (or its compressed blocks), and
// the index trunk.json, which records the checkpoint's content
// fingerprint. Open with Options.TrunkDir = out then reads each part with
// one aligned request. Files are written under temporary names, synced and
// renamed; the checkpoint is never written to, and out must not be it.
func Pack(ctx context.Context, dir, out string, opts PackOptions) error {
	return engine.Pack(ctx, dir, out, opts.Force, trunk.PackWriteOptions{Compress: opts.Compress, Progress: opts.Progress})
}

// SliceOptions configure Slice.
type SliceOptions struct {
	// Rank and Ranks: the slice is for rank Rank (0..Ranks-1) of a
	// cluster of Ranks >= 2 ranks.
	Rank, Ranks int
	// Progress, if set, is called with the bytes copied so far and the
	// slice's total.
	Progress func(done, total int64)
}

// SliceInfo describes a slice Slice wrote: its rank, the checkpoint's
// content fingerprint (the slice keeps it), and the bytes of the shards it
// holds against the whole checkpoint's.
type SliceInfo struct {
	Rank, Ranks  int
	Fingerprint  string
	Bytes, Total int64
}

// Slice writes into out the share of the checkpoint in dir that rank
// Rank of a cluster of Ranks ranks reads: every shard as a sparse file of
// its full size holding the rank's rows of every weight matrix (the
// layers', the output head's, each routed expert's), the embeddings for
// rank 0, every norm and vector, the headers and the bytes the content
// fingerprint samples, with holes elsewhere; every other file of dir whole;
// and a note of the rank, so that another rank (or one process) refuses
// the directory with ErrSlice instead of reading holes as weights. A node
// of a cluster then needs only its rank's share of the disk (about
// 1/Ranks of the checkpoint), and copies that keep holes (cp
// --sparse=always, rsync --sparse, tar --sparse) keep it so. dir is only
// read; out must not exist or be empty.
func Slice(ctx context.Context, dir, out string, opts SliceOptions) (SliceInfo, error) {
	s, err := engine.Slice(ctx, dir, out, opts.Rank, opts.Ranks, opts.Progress)
	return SliceInfo{Rank: s.Rank, Ranks: s.Ranks, Fingerprint: s.Fingerprint, Bytes: s.Bytes, Total: s.Total}, err
}
