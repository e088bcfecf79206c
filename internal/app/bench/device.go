package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/k3go/k3/iox"
)

// dropCaches evicts the checkpoint's pages from the page cache with
// POSIX_FADV_DONTNEED and says what it did.
func dropCaches(paths []string) string {
	var failed []string
	for _, p := range paths {
		f, err := iox.OpenFile(p, iox.FileOptions{})
		if err == nil {
			err = f.DropCache()
			f.Close()
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", filepath.Base(p), err))
		}
	}
	if len(failed) > 0 {
		return "page cache partly dropped (" + strings.Join(failed, "; ") + "); engine reads use O_DIRECT anyway"
	}
	return "checkpoint pages dropped from the page cache (POSIX_FADV_DONTNEED); engine reads use O_DIRECT"
}

// probeShape returns the device probe's read size and reads in flight
// (16 MiB × 8) shrunk to fit room bytes of buffers; 0, 0 if even 1 MiB
// does not fit.
func probeShape(room int64) (chunk int64, qd int) {
	chunk, qd = 16<<20, 8
	for int64(qd)*chunk > room && qd > 1 {
		qd /= 2
	}
	for chunk > room && chunk > 1<<20 {
		chunk /= 2
	}
	if chunk > room {
		return 0, 0
	}
	return chunk, qd
}

// probeChunk is the size of the device probe's reads: large enough that
// the device, not the per-request cost, sets the rate.
const probeChunk = 16 << 20

// measureDevice measures the read bandwidth of the device holding the
// checkpoint with about n bytes of O_DIRECT reads of chunk bytes, qd in
// flight, and says how. It reads the
// checkpoint's own files when at least one holds a probeChunk; a small
// checkpoint (tiny, quickstart) gets a temporary file of n bytes written
// next to it, on the same file system, and removed. A device that cannot be
// measured (no space for the file, a refused write) is no failure: the
// note says why and the I/O roofline is left out. Only cancellation is an
// error.
func measureDevice(ctx context.Context, dir string, shards []string, n, chunk int64, qd int, stderr io.Writer) (float64, string, error) {
	if largestFile(shards) >= probeChunk {
		fmt.Fprintf(stderr, "bench: measuring the device with %s of O_DIRECT reads of the checkpoint...\n", human(n))
		gbps, err := deviceBandwidth(ctx, shards, n, chunk, qd)
		if err == nil || ctx.Err() != nil {
			return gbps, fmt.Sprintf("random %s reads of the checkpoint", human(chunk)), err
		}
		fmt.Fprintf(stderr, "bench: reading the checkpoint failed (%v); trying a temporary file\n", err)
	}
	size := iox.AlignUp(max(n, 2*chunk))
	fmt.Fprintf(stderr, "bench: the checkpoint's files are too small to probe; measuring the device with a temporary file of %s in %s...\n", human(size), dir)
	res, err := iox.ProbeBandwidth(ctx, dir, iox.ProbeOptions{FileSize: size, QueueDepths: []int{qd}, ChunkSize: int(chunk),
		RandomReadSize: int(chunk), RandomReads: int(size / chunk), SmallReads: 1})
	if ctx.Err() != nil {
		return 0, "", ctx.Err()
	}
	if err != nil || len(res.Runs) == 0 || res.Runs[0].Random.GBps() <= 0 {
		fmt.Fprintf(stderr, "bench: device unmeasured: %v\n", err)
		return 0, fmt.Sprintf("unmeasured: %v", err), nil
	}
	note := fmt.Sprintf("random %s reads of a temporary %s file", human(chunk), human(size))
	if !res.Direct {
		note += "; O_DIRECT refused, so the page cache may be in it"
	}
	return res.Runs[0].Random.GBps(), note, nil
}

// largestFile returns the size of the largest of paths that exists.
func largestFile(paths []string) int64 {
	var n int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			n = max(n, st.Size())
		}
	}
	return n
}

// deviceBandwidth reads about n bytes of the given files at random aligned
// windows of chunk bytes, qd reads in flight, with O_DIRECT, and returns
// GB/s.
func deviceBandwidth(ctx context.Context, paths []string, n, chunk int64, qd int) (float64, error) {
	type src struct {
		f    *iox.File
		size int64
	}
	var srcs []src
	var total int64
	for _, p := range paths {
		f, err := iox.OpenFile(p, iox.FileOptions{Direct: true})
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if f.Size() >= chunk {
			srcs = append(srcs, src{f, f.Size()})
			total += f.Size()
		}
	}
	if len(srcs) == 0 {
		return 0, fmt.Errorf("no file of at least %d bytes to read", chunk)
	}
	rd, err := iox.NewReader(iox.ReaderOptions{QueueDepth: qd, ChunkSize: int(chunk)})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	bufs := make([]*iox.Buffer, qd)
	for i := range bufs {
		if bufs[i], err = iox.AllocAligned(int(chunk), iox.BufferOptions{HugePages: true, Populate: true}); err != nil {
			return 0, err
		}
		defer bufs[i].Free()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	pick := func() (iox.Source, int64) {
		x := rng.Int64N(total)
		for _, s := range srcs {
			if x < s.size {
				off := rng.Int64N(s.size-chunk+1) &^ (iox.Align - 1)
				return s.f, off
			}
			x -= s.size
		}
		return srcs[0].f, 0
	}
	reads := max(int(n/chunk), qd)
	futs := make([]*iox.Future, qd)
	start := time.Now()
	var done int64
	for i := 0; i < reads+qd; i++ {
		k := i % qd
		if futs[k] != nil {
			if _, err := futs[k].Wait(); err != nil {
				return 0, err
			}
			<-futs[k].Released()
			done += chunk
		}
		if i < reads {
			s, off := pick()
			futs[k] = rd.Submit(ctx, iox.Request{Src: s, Off: off, Len: int(chunk), Dst: bufs[k].Bytes()[:chunk]})
		} else {
			futs[k] = nil
		}
	}
	return float64(done) / time.Since(start).Seconds() / 1e9, nil
}
