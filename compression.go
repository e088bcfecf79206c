package k3

import (
	"context"

	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/trunk"
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
// rates, a short disk measurement and the verdict. Rates are in raw
// (decompressed) bytes per second.
type CompressionReport struct {
	// SampleBytes is the raw bytes compressed, StoredBytes what they
	// compress to; Ratio is StoredBytes / SampleBytes.
	SampleBytes, StoredBytes int64
	Ratio                    float64
	// DecodePerCore is the decode rate of one core, DecodeAll that of
	// Cores cores decoding one part together, as the trunk ring does.
	DecodePerCore, DecodeAll float64
	Cores                    int
	// DiskRate is a short direct read of the trunk's bytes: a rough
	// figure (one 64 MiB run), 0 if not measured.
	DiskRate float64
	// NeedDecode is the decode rate (all cores) at which compression
	// breaks even, FullDecode the rate from which it gains all it can
	// (Ratio): decoding overlaps the reads, so a raw byte costs
	// max(Ratio/DiskRate, 1/DecodeAll) instead of 1/DiskRate.
	NeedDecode, FullDecode float64
	// Pays says compression beats reading the trunk raw here.
	Pays bool

	m trunk.CompressionReport // what String and Judge work from
}

// String is a one-paragraph human report.
func (r CompressionReport) String() string { return r.m.String() }

// Judge returns the report with the verdict redone for another disk rate
// (bytes per second), for instance one a longer device probe measured.
func (r CompressionReport) Judge(diskRate float64) CompressionReport {
	return newCompressionReport(r.m.Judge(diskRate))
}

func newCompressionReport(r trunk.CompressionReport) CompressionReport {
	return CompressionReport{SampleBytes: r.SampleBytes, StoredBytes: r.StoredBytes, Ratio: r.Ratio,
		DecodePerCore: r.DecodePerCore, DecodeAll: r.DecodeAll, Cores: r.Cores, DiskRate: r.DiskRate,
		NeedDecode: r.NeedDecode, FullDecode: r.FullDecode, Pays: r.Pays, m: r}
}

// MeasureCompression samples the trunk of the checkpoint in dir: it
// compresses 128 blocks (32 MiB) spread over up to 32 layer parts as k3
// pack --compress would, times decoding them on one core and on all, times
// a short direct read (64 MiB), and says whether compression pays off
// here: when all cores decode faster than the disk reads (decoding
// overlaps the reads, so a byte then costs less than reading it raw). It
// takes about a second.
func MeasureCompression(ctx context.Context, dir string) (CompressionReport, error) {
	r, err := engine.MeasureCompression(ctx, dir)
	if err != nil {
		return CompressionReport{}, err
	}
	return newCompressionReport(r), nil
}
