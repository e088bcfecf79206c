package k3

import (
	"context"
	"fmt"

	"github.com/k3go/k3/model"
)

// Compression selects how a compressed packed trunk is used.
type Compression int

const (
	// CompressionAuto decodes the compressed pack when a sample measured
	// at Open says decoding beats the disk, and otherwise reads the
	// checkpoint's shards.
	CompressionAuto Compression = iota
	// CompressionOn always decodes the compressed pack.
	CompressionOn
	// CompressionOff never decodes it: the trunk is read from the shards.
	CompressionOff
)

// CompressionReport is what a sample of a checkpoint's trunk says about
// compressing it (k3 pack --compress) on this machine: the ratio, decode
// rates, a short disk measurement and the verdict.
type CompressionReport = model.CompressionReport

// MeasureCompression samples the trunk of the checkpoint in dir: it
// compresses 128 blocks (32 MiB) spread over up to 32 layer parts as k3
// pack --compress would, times decoding them on one core and on all, times
// a short direct read (64 MiB), and says whether compression pays off
// here: when all cores decode faster than the disk reads (decoding
// overlaps the reads, so a byte then costs less than reading it raw). It
// takes about a second.
func MeasureCompression(ctx context.Context, dir string) (CompressionReport, error) {
	var r CompressionReport
	e, plan, err := openForPack(dir)
	if err != nil {
		return r, err
	}
	defer e.closePack()
	if r, err = plan.MeasureCompression(ctx, e.read, packAlloc, true); err != nil {
		return r, fmt.Errorf("k3: %w", err)
	}
	return r, nil
}

// packAlloc gives buffers from the Go heap (large ones are page-aligned;
// the reader copies through a bounce buffer otherwise).
func packAlloc(n int64) ([]byte, error) { return make([]byte, n), nil }
