package iox_test

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/k3go/k3/iox"
)

// benchFile writes a K3_IOX_BENCH_MB (default 256) MiB file of random bytes
// into K3_IOX_BENCH_DIR (default: a temp dir), syncs it and drops it from
// the page cache. The contents are new on every run: storage that dedupes
// or caches by content (some virtual disks do) would otherwise serve a
// previous run's identical blocks from its cache and report memory speed.
func benchFile(b *testing.B) (*iox.File, int64) {
	mb := 256
	if s := os.Getenv("K3_IOX_BENCH_MB"); s != "" {
		var err error
		if mb, err = strconv.Atoi(s); err != nil || mb < 32 {
			b.Fatalf("K3_IOX_BENCH_MB=%q: want an integer ≥ 32", s)
		}
	}
	size := int64(mb) << 20
	dir := os.Getenv("K3_IOX_BENCH_DIR") // default: the test's temp dir
	if dir == "" {
		dir = b.TempDir()
	} else {
		d, err := os.MkdirTemp(dir, ".iox-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	path := writeRandomFile(b, dir, size)
	f, err := iox.OpenFile(path, iox.FileOptions{Direct: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	f.DropCache()
	b.Logf("%s (%s): mode %v %s", dir, fsType(b, dir), f.Mode(), f.DirectFallback())
	return f, size
}

func reportBusy(b *testing.B, r *iox.Reader) {
	st := r.Stats()
	b.ReportMetric(st.BusyGBps(), "busyGB/s")
	if st.Reads > 0 && st.DirectReads != st.Reads {
		b.ReportMetric(float64(st.Reads-st.DirectReads), "buffered-reads")
	}
}

// BenchmarkReader reads the whole file per iteration (one request, split
// into chunks) at queue depths 1, 4 and 16, and expert-sized reads
// (17,547,264 B at random unaligned offsets, 8 per batch).
func BenchmarkReader(b *testing.B) {
	f, size := benchFile(b)
	ctx := context.Background()
	for _, qd := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("seq/qd%d", qd), func(b *testing.B) {
			r := newReader(b, iox.ReaderOptions{QueueDepth: qd})
			buf, err := iox.AllocAligned(int(size), iox.BufferOptions{HugePages: true, Populate: true})
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Free()
			b.SetBytes(size)
			for b.Loop() {
				if _, err := r.Submit(ctx, iox.Request{Src: f, Off: 0, Len: int(size), Dst: buf.Bytes()}).Wait(); err != nil {
					b.Fatal(err)
				}
			}
			reportBusy(b, r)
		})
	}
	const expert, batch = iox.ExpertBytes, 8
	for _, qd := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("expert/qd%d", qd), func(b *testing.B) {
			r := newReader(b, iox.ReaderOptions{QueueDepth: qd})
			slot := iox.WindowLen(1, expert) // expert + 8 KiB slack, rounded to 4096, as the reference's slots
			arena, err := iox.AllocAligned(batch*slot, iox.BufferOptions{HugePages: true, Populate: true})
			if err != nil {
				b.Fatal(err)
			}
			defer arena.Free()
			rng := rand.New(rand.NewPCG(1, 2))
			reqs := make([]iox.Request, batch)
			b.SetBytes(batch * expert)
			for b.Loop() {
				for i := range reqs {
					off := rng.Int64N(size - expert)
					reqs[i] = iox.Request{Src: f, Off: off, Len: expert, Dst: arena.Bytes()[i*slot : (i+1)*slot]}
				}
				if err := iox.WaitAll(r.SubmitBatch(ctx, reqs)...); err != nil {
					b.Fatal(err)
				}
			}
			reportBusy(b, r)
		})
	}
	b.Run("seq/buffered-cold/qd4", func(b *testing.B) {
		r := newReader(b, iox.ReaderOptions{QueueDepth: 4})
		dst := make([]byte, size) // not aligned to 4096 in general: buffered
		b.SetBytes(size)
		for b.Loop() {
			f.DropCache()
			if _, err := r.Submit(ctx, iox.Request{Src: iox.NewSource(f, size, f.Name()), Off: 0, Len: int(size), Dst: dst}).Wait(); err != nil {
				b.Fatal(err)
			}
		}
		reportBusy(b, r)
		f.DropCache()
	})
}

func writeRandomFile(b *testing.B, dir string, size int64) string {
	path := filepath.Join(dir, "bench.bin")
	w, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var seed [32]byte
	crand.Read(seed[:])
	rng := rand.NewChaCha8(seed)
	buf := make([]byte, 8<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), size-off)]
		rng.Read(p)
		if _, err := w.Write(p); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
	return path
}
