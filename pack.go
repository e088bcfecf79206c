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
