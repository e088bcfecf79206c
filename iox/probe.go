package iox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/k3go/k3/internal/platform/sysinfo"
	"math/rand/v2"
	"os"
	"time"
)

// ExpertBytes is the size of one routed Kimi K3 expert (w1, w2, w3 packed
// MXFP4 weights and scales, one contiguous run): the default random read of
// [ProbeBandwidth].
const ExpertBytes = 17_547_264

// ProbeOptions configures [ProbeBandwidth]. The zero value gives the
// defaults.
type ProbeOptions struct {
	// FileSize is the size of the temporary file written and read back; 0
	// means 1 GiB. It is rounded up to a multiple of [Align]. Larger files
	// defeat device caches better.
	FileSize int64
	// QueueDepths lists the queue depths (reads in flight) to measure, each
	// with its own [Reader]; nil means {1, DefaultQueueDepth}.
	QueueDepths []int
	// ChunkSize is the size of each sequential read and the Readers' chunk
	// size; 0 means [DefaultChunkSize].
	ChunkSize int
	// RandomReadSize is the size of random reads at unaligned offsets, like
	// experts; 0 means [ExpertBytes]. It is capped at FileSize/2.
	RandomReadSize int
	// RandomReads is the number of random reads per queue depth; 0 means
	// enough to read FileSize bytes (at least 8).
	RandomReads int
	// SmallReadSize is the size of small random reads at aligned offsets; 0
	// means 1 MiB. It is capped at FileSize/2.
	SmallReadSize int
	// SmallReads is the number of small random reads per queue depth; 0 means
	// enough to read FileSize/2 bytes (16 to 1024 reads).
	SmallReads int
	// MinFree is the free space that must remain after the file is written;
	// 0 means 256 MiB, negative means none.
	MinFree int64
	// Seed seeds the file contents and the random offsets; 0 means a new
	// random seed. Keep contents unique across runs: storage that dedupes or
	// caches by content would serve a previous run's blocks from cache.
	Seed uint64

	// file is how the probe file is opened for reading (Direct is always
	// set); iox's tests inject faults through it.
	file FileOptions
}

// Throughput is one measurement.
type Throughput struct {
	Bytes   int64         // payload bytes
	Ops     int64         // requests (reads or writes)
	Size    int           // bytes per request
	Elapsed time.Duration // wall time
}

// GBps returns Bytes per second of Elapsed in GB/s (10⁹ bytes).
func (t Throughput) GBps() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Bytes) / t.Elapsed.Seconds() / 1e9
}

func (t Throughput) String() string {
	return fmt.Sprintf("%.2f GB/s (%d × %d B in %v)", t.GBps(), t.Ops, t.Size, t.Elapsed.Round(time.Millisecond))
}

// ProbeRun holds the measurements at one queue depth.
type ProbeRun struct {
	QueueDepth int
	Sequential Throughput // the whole file in ChunkSize reads
	Random     Throughput // RandomReadSize reads at random unaligned offsets
	Small      Throughput // SmallReadSize reads at random aligned offsets
	Stats      Stats      // the Reader's counters for the run
}

// ProbeResult is the outcome of [ProbeBandwidth].
type ProbeResult struct {
	Dir         string
	FSType      string
	FileSize    int64
	Direct      bool // every read bypassed the page cache (O_DIRECT)
	DirectWrite bool // the file was written with O_DIRECT
	Write       Throughput
	Runs        []ProbeRun
	// Note lists caveats: a file system that refused O_DIRECT (the numbers
	// may include the page cache), a RAM-backed file system.
	Note string
}

// ProbeBandwidth measures the read bandwidth of the disk holding dir, not
// through the page cache: it writes a temporary file of opts.FileSize into
// dir (with O_DIRECT, or buffered then fsync and POSIX_FADV_DONTNEED), reads
// it back with O_DIRECT at each queue depth (sequentially, then random
// expert-sized reads, then small random reads), and deletes it. The file is
// removed on every return path, error and cancellation included (a killed
// process leaves a ".k3-probe-*" file behind). It refuses with
// [ErrInsufficientSpace] when the file system lacks FileSize + MinFree.
//
// Memory: each queue depth N holds about N × ChunkSize (sequential) and up
// to (N/3 + 2) × RandomReadSize (random) of hugepage-backed, pre-faulted
// buffers (each rounded up to 2 MiB), allocated and freed per phase.
func ProbeBandwidth(ctx context.Context, dir string, opts ProbeOptions) (res ProbeResult, err error) {
	size := AlignUp(cmp.Or(opts.FileSize, 1<<30))
	chunk := int(AlignUp(int64(cmp.Or(opts.ChunkSize, DefaultChunkSize))))
	if size <= 0 || chunk <= 0 || chunk > MaxChunkSize {
		return res, fmt.Errorf("iox: ProbeBandwidth: bad FileSize %d or ChunkSize %d", opts.FileSize, opts.ChunkSize)
	}
	qds := opts.QueueDepths
	if len(qds) == 0 {
		qds = []int{1, DefaultQueueDepth}
	}
	for _, qd := range qds {
		if qd < 1 || qd > MaxQueueDepth {
			return res, fmt.Errorf("iox: ProbeBandwidth: queue depth %d outside [1, %d]", qd, MaxQueueDepth)
		}
	}
	randSize := min(cmp.Or(opts.RandomReadSize, ExpertBytes), int(size/2))
	randN := cmp.Or(opts.RandomReads, max(8, int(size/int64(max(randSize, 1)))))
	smallSize := min(cmp.Or(opts.SmallReadSize, 1<<20), int(size/2))
	smallN := cmp.Or(opts.SmallReads, min(1024, max(16, int(size/2/int64(max(smallSize, 1))))))
	minFree := opts.MinFree
	if minFree == 0 {
		minFree = 256 << 20
	}
	minFree = max(minFree, 0)

	seed := opts.Seed
	for seed == 0 {
		seed = rand.Uint64()
	}
	res = ProbeResult{Dir: dir, FileSize: size}
	ds, err := sysinfo.FreeSpace(dir)
	switch {
	case err == nil:
		res.FSType = ds.FSType
		if ds.Free < size+minFree {
			return res, fmt.Errorf("iox: ProbeBandwidth: %s has %d bytes free, the probe needs %d + %d kept free: %w",
				dir, ds.Free, size, minFree, ErrInsufficientSpace)
		}
	case !errors.Is(err, errors.ErrUnsupported):
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	tmp, err := os.CreateTemp(dir, ".k3-probe-*.tmp")
	if err != nil {
		return res, fmt.Errorf("iox: ProbeBandwidth: %w", err)
	}
	path := tmp.Name()
	tmp.Close()
	defer func() {
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("iox: ProbeBandwidth: removing %s: %w", path, rerr)
		}
	}()

	res.Write, res.DirectWrite, err = writeProbeFile(ctx, path, size, chunk, seed)
	if err != nil {
		return res, err
	}

	fo := opts.file
	fo.Direct = true
	f, err := OpenFile(path, fo)
	if err != nil {
		return res, err
	}
	defer f.Close()
	if f.Mode() != ModeDirect {
		_ = f.DropCache()
	}
	rng := rand.New(rand.NewPCG(seed, 0x6b33))
	direct := f.Mode() == ModeDirect
	for _, qd := range qds {
		run, err := probeRun(ctx, f, qd, chunk, size, randSize, randN, smallSize, smallN, rng)
		res.Runs = append(res.Runs, run)
		if err != nil {
			return res, err
		}
		if run.Stats.DirectReads == 0 || run.Stats.Reads != run.Stats.DirectReads {
			direct = false
		}
	}
	res.Direct = direct && f.Mode() == ModeDirect
	if !res.Direct {
		res.Note = "O_DIRECT unavailable (" + f.DirectFallback() + "): buffered reads, the numbers may include the page cache"
	}
	if res.FSType == "tmpfs" || res.FSType == "ramfs" {
		res.Note = joinNote(res.Note, res.FSType+" is RAM: the numbers are memory bandwidth, not a disk's")
	}
	return res, nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// writeProbeFile fills path with size pseudo-random bytes, with O_DIRECT
// where the file system allows it, and leaves none of it in the page cache.
func writeProbeFile(ctx context.Context, path string, size int64, chunk int, seed uint64) (Throughput, bool, error) {
	t, err := writeProbe(ctx, path, size, chunk, seed, true)
	if errors.Is(err, errDirectRefused) {
		t, err = writeProbe(ctx, path, size, chunk, seed, false)
		return t, false, err
	}
	return t, true, err
}

func writeProbe(ctx context.Context, path string, size int64, chunk int, seed uint64, direct bool) (Throughput, error) {
	t := Throughput{Size: chunk}
	buf, err := AllocAligned(chunk, BufferOptions{})
	if err != nil {
		return t, err
	}
	defer buf.Free()
	var (
		write func(p []byte, off int64) (int, error)
		sync  func() error
	)
	if direct {
		fd, err := openDirectWrite(path)
		if err != nil {
			return t, fmt.Errorf("%w: %w", errDirectRefused, err)
		}
		defer closeFD(fd)
		write = func(p []byte, off int64) (int, error) { return sysPwrite(fd, p, off) }
		sync = func() error { return fsyncFD(fd) }
	} else {
		of, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return t, fmt.Errorf("iox: ProbeBandwidth: %w", err)
		}
		defer of.Close()
		write = of.WriteAt
		sync = func() error {
			if err := of.Sync(); err != nil {
				return err
			}
			return dropCache(of, 0, 0)
		}
	}

	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	rng := rand.NewChaCha8(key)
	b := buf.Bytes()
	start := time.Now()
	for off := int64(0); off < size; off += int64(chunk) {
		if err := ctx.Err(); err != nil {
			return t, err
		}
		p := b[:min(int64(chunk), size-off)]
		rng.Read(p)
		for done := 0; done < len(p); {
			n, err := write(p[done:], off+int64(done))
			done += max(n, 0)
			switch {
			case err == nil || isRetryable(err):
			case direct && isDirectRefusal(err) && off == 0 && done == 0:
				return t, fmt.Errorf("%w: %w", errDirectRefused, err)
			default:
				return t, fmt.Errorf("iox: ProbeBandwidth: writing %s at %d: %w", path, off+int64(done), err)
			}
		}
		t.Ops++
		t.Bytes += int64(len(p))
	}
	if err := sync(); err != nil {
		return t, fmt.Errorf("iox: ProbeBandwidth: syncing %s: %w", path, err)
	}
	t.Elapsed = time.Since(start)
	return t, nil
}

// probeRun measures one queue depth.
func probeRun(ctx context.Context, f *File, qd, chunk int, size int64, randSize, randN, smallSize, smallN int, rng *rand.Rand) (ProbeRun, error) {
	run := ProbeRun{QueueDepth: qd}
	r, err := NewReader(ReaderOptions{QueueDepth: qd, ChunkSize: chunk})
	if err != nil {
		return run, err
	}
	defer r.Close()

	dropCache := func() { // buffered fallback only: start each phase cold
		if f.Mode() != ModeDirect {
			_ = f.DropCache()
		}
	}
	dropCache()
	seqN := int((size + int64(chunk) - 1) / int64(chunk))
	run.Sequential, err = pump(ctx, r, f, qd, chunk, seqN, func(i int) (int64, int) {
		off := int64(i) * int64(chunk)
		return off, int(min(int64(chunk), size-off))
	})
	if err != nil {
		return run, err
	}
	dropCache()
	perReq := (randSize + 2*Align + chunk - 1) / chunk // chunks per random read
	slots := (qd+perReq-1)/perReq + 1
	run.Random, err = pump(ctx, r, f, slots, randSize, randN, func(int) (int64, int) {
		return rng.Int64N(size - int64(randSize) + 1), randSize
	})
	if err != nil {
		return run, err
	}
	dropCache()
	run.Small, err = pump(ctx, r, f, qd, smallSize, smallN, func(int) (int64, int) {
		return AlignDown(rng.Int64N(size - int64(smallSize) + 1)), smallSize
	})
	run.Stats = r.Stats()
	return run, err
}

// pump keeps up to slots requests of at most size bytes in flight until n
// have completed, each into its own aligned buffer; gen gives request i.
func pump(ctx context.Context, r *Reader, src Source, slots, size, n int, gen func(i int) (int64, int)) (Throughput, error) {
	t := Throughput{Size: size}
	if n <= 0 || size <= 0 {
		return t, nil
	}
	slots = min(slots, n)
	bufs := make([]*Buffer, slots)
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	free := make([][]byte, 0, slots)
	for i := range bufs {
		// Hugepage-backed and pre-faulted, as the engine's arenas should be:
		// with 4 KiB pages, pinning them for O_DIRECT costs more than the
		// device on fast disks, and the probe would measure that instead.
		b, err := AllocAligned(size+2*Align, BufferOptions{HugePages: true, Populate: true})
		if err != nil {
			return t, err
		}
		bufs[i] = b
		free = append(free, b.Bytes())
	}
	type inflight struct {
		f   *Future
		dst []byte
	}
	var q []inflight
	defer func() { // never free a buffer a read still targets
		for _, x := range q {
			<-x.f.Released()
		}
	}()
	start := time.Now()
	for next := 0; next < n || len(q) > 0; {
		for next < n && len(free) > 0 {
			off, l := gen(next)
			dst := free[len(free)-1]
			free = free[:len(free)-1]
			q = append(q, inflight{r.Submit(ctx, Request{Src: src, Off: off, Len: l, Dst: dst}), dst})
			next++
		}
		x := q[0]
		p, err := x.f.Wait()
		if err != nil {
			return t, err
		}
		q = q[1:]
		t.Ops++
		t.Bytes += int64(len(p))
		free = append(free, x.dst)
	}
	t.Elapsed = time.Since(start)
	return t, nil
}
