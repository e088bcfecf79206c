package trunk

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/iox"
)

// CompressionReport is what a sample of the checkpoint's trunk says about
// compressing it on this machine.
type CompressionReport struct {
	SampleBytes int64   // raw bytes compressed
	StoredBytes int64   // what they compress to
	Ratio       float64 // StoredBytes / SampleBytes
	// Decode rates in raw (output) bytes per second: one core, and all
	// Cores decoding one part together as the trunk ring does.
	DecodePerCore, DecodeAll float64
	Cores                    int
	// DiskRate is a short direct read of the trunk's bytes: a rough
	// figure (one 64 MiB run, two requests in flight), 0 if not measured.
	DiskRate float64
	// NeedDecode is the decode rate (raw bytes, all cores) at which
	// compression breaks even. A part's chunks decode while its later
	// chunks are read, so a raw byte costs max(Ratio/DiskRate,
	// 1/DecodeAll) instead of 1/DiskRate: compression pays when the cores
	// decode faster than the disk reads, NeedDecode = DiskRate, and gains
	// all it can (Ratio) from FullDecode = DiskRate / Ratio on. Where the
	// decode must also share the cores with compute (a ring with room to
	// read the next part during the current one's compute) the gain is
	// smaller than this says.
	NeedDecode, FullDecode float64
	Pays                   bool
}

// String is a one-paragraph human report.
func (r CompressionReport) String() string {
	s := fmt.Sprintf("compressed trunk: ratio %.3f on a %s sample (%s stored); decode %.2f GB/s per core, %.2f GB/s on %d cores",
		r.Ratio, planner.Human(r.SampleBytes), planner.Human(r.StoredBytes), r.DecodePerCore/1e9, r.DecodeAll/1e9, r.Cores)
	if r.DiskRate <= 0 {
		return s + "; disk rate not measured"
	}
	verdict := "pays off here"
	if !r.Pays {
		verdict = "does not pay off here"
	}
	return s + fmt.Sprintf("; disk %.2f GB/s: decoding on all cores breaks even at %.2f GB/s and gains the full ratio from %.2f GB/s: compression %s",
		r.DiskRate/1e9, r.NeedDecode/1e9, r.FullDecode/1e9, verdict)
}

// The sample: blocks from up to compressionSampleParts parts spread over
// the layers, compressionSampleBlocks blocks in all (32 MiB) when the
// parts are few.
const (
	compressionSampleParts  = 32
	compressionSampleBlocks = 128
)

// MeasureCompression compresses 128 blocks (32 MiB) spread over up to 32
// parts of the trunk, times decoding them on one core and
// on all, and (if diskTime) times a 64 MiB direct read of trunk bytes.
// read must be the engine's reader of the checkpoint (or of an
// uncompressed pack); buffers come from alloc (aligned).
func (l *Layout) MeasureCompression(ctx context.Context, read ReadFunc, alloc Alloc, diskTime bool) (CompressionReport, error) {
	var r CompressionReport
	n := min(len(l.parts), compressionSampleParts)
	buf, err := alloc(compBlockBytes + 2*Align)
	if err != nil {
		return r, err
	}
	raw := make([]byte, 0, max(n, compressionSampleBlocks)*compBlockBytes)
	for i := range n {
		pp := &l.parts[i*len(l.parts)/n]
		if pp.comp != nil {
			return r, fmt.Errorf("measuring compression: the trunk is read from a compressed pack; measure on the checkpoint")
		}
		// The largest extent; blocks spread along it, each on a word
		// boundary of the part's image.
		e := pp.extents[0]
		for _, x := range pp.extents {
			if x.Size > e.Size {
				e = x
			}
		}
		size := min(int64(compBlockBytes), e.Size) &^ 1
		if size <= 0 {
			continue
		}
		per := max(1, compressionSampleBlocks/n)
		for j := range per {
			d := (e.Size - size) * int64(2*j+1) / int64(2*per)
			if (e.BufOff+d)%2 != 0 {
				d--
			}
			if d < 0 {
				continue
			}
			x, _ := iox.SingleExtent(e.File, e.Off+d, size)
			if err := read(ctx, x, buf); err != nil {
				return r, fmt.Errorf("measuring compression: layer %d %s: %w", pp.Layer, pp.Part, err)
			}
			raw = append(raw, buf[x.BufOff:x.BufOff+size]...)
		}
	}
	// Compress as independent blocks; the sample's total is a multiple of
	// 2 but its blocks may straddle two parts' samples, which does not
	// change the statistics.
	var enc blockEncoder
	stored, cp := compressImage(&enc, nil, raw)
	r.SampleBytes, r.StoredBytes = int64(len(raw)), cp.stored
	if len(raw) == 0 {
		return r, fmt.Errorf("measuring compression: no trunk bytes to sample")
	}
	r.Ratio = float64(r.StoredBytes) / float64(r.SampleBytes)

	out := make([]byte, len(raw))
	// One core.
	var d blockDecoder
	var bytes int64
	start := time.Now()
	for time.Since(start) < 300*time.Millisecond {
		for b := range cp.blocks() {
			lo := b * cp.block
			hi := min(lo+cp.block, len(out))
			crc, err := d.decodeBlock(out[lo:hi], stored[cp.offs[b]:cp.offs[b+1]])
			if err != nil {
				return r, fmt.Errorf("measuring compression: %w", err)
			}
			if crc != cp.crc[b] {
				return r, fmt.Errorf("measuring compression: block %d decodes wrongly", b)
			}
		}
		bytes += int64(len(out))
	}
	r.DecodePerCore = float64(bytes) / time.Since(start).Seconds()
	// All cores, as the ring decodes a part.
	r.Cores = runtime.GOMAXPROCS(0)
	ds := newDecoders(r.Cores)
	defer ds.close()
	var run decodeRun
	room, _ := compRoom(int64(len(raw)), cp, Extent{Off: 0, Size: cp.stored})
	work := make([]byte, room)
	bytes = 0
	start = time.Now()
	for time.Since(start) < 300*time.Millisecond {
		// The copy into the buffer's tail stands in for the read.
		if b := ds.decode(&run, work, int64(len(raw)), stored, cp); b >= 0 {
			return r, fmt.Errorf("measuring compression: block %d decodes wrongly", b)
		}
		bytes += int64(len(out))
	}
	r.DecodeAll = float64(bytes) / time.Since(start).Seconds()
	if diskTime {
		disk, err := l.measureDisk(ctx, read, alloc)
		if err != nil {
			return r, err
		}
		r = r.Judge(disk)
	}
	return r, nil
}

// Judge returns the report with the verdict for a disk delivering
// diskRate bytes per second.
func (r CompressionReport) Judge(diskRate float64) CompressionReport {
	r.DiskRate, r.NeedDecode, r.FullDecode, r.Pays = diskRate, 0, 0, false
	if r.Ratio < 1 && r.Ratio > 0 && diskRate > 0 {
		r.NeedDecode, r.FullDecode = diskRate, diskRate/r.Ratio
		r.Pays = r.DecodeAll > r.NeedDecode
	}
	return r
}

// measureDisk times a direct read of up to 64 MiB of the largest part's
// bytes, 8 MiB per request and two requests in flight (the ring reads two
// parts ahead at most).
func (l *Layout) measureDisk(ctx context.Context, read ReadFunc, alloc Alloc) (float64, error) {
	const chunk, total = 8 << 20, 64 << 20
	var big *part
	for u := range l.parts {
		if big == nil || l.parts[u].Bytes > big.Bytes {
			big = &l.parts[u]
		}
	}
	var jobs []Extent
	var n int64
	for _, e := range big.extents {
		for off := int64(0); off < e.Size && n < total; off += chunk {
			sz := min(chunk, e.Size-off)
			x, _ := iox.SingleExtent(e.File, e.Off+off, sz)
			jobs = append(jobs, x)
			n += sz
		}
	}
	var bufs [2][]byte
	for i := range bufs {
		b, err := alloc(chunk + 2*Align)
		if err != nil {
			return 0, err
		}
		bufs[i] = b
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < len(jobs); j += 2 {
				if err := read(ctx, jobs[j], bufs[w]); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("measuring the disk: %w", err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
