package iox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/iox/ioxtest"
)

type span struct {
	off int64
	n   int
}

// exactCases covers aligned and unaligned offsets and lengths, tiny reads,
// the reference's 1,632-byte cache fixture expert, a 17,547,264-byte expert,
// chunk boundaries (for 64 KiB and 1 MiB chunks), the whole file and the
// window that crosses EOF.
func exactCases(size int64) []span {
	const expert = 17_547_264
	return []span{
		{0, 0}, {7, 0}, {0, 1}, {1, 1}, {4095, 1}, {4095, 2}, {4096, 1}, {size - 1, 1},
		{0, 4096}, {4096, 4096}, {1, 4096}, {4097, 4095},
		{12345, 1632}, {8192 + 3000, 1632}, {size - 1632, 1632},
		{0, expert}, {4096*3 + 17, expert}, {size - expert - 4095, expert},
		{64<<10 - 1, 2}, {64<<10 - 100, 64<<10 + 200}, {1<<20 - 100, 200}, {3<<20 - 5, 2<<20 + 10},
		{size - 5000, 5000}, {size - 1<<20 - 3, 1<<20 + 3},
		{0, int(size)},
	}
}

func TestReadExact(t *testing.T) {
	file := openPattern(t, testFileSize, iox.FileOptions{Direct: true})
	buffered, err := iox.OpenFile(file.Name(), iox.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer buffered.Close()
	var (
		def   = iox.ReaderOptions{}
		small = iox.ReaderOptions{QueueDepth: 3, ChunkSize: 64 << 10}
		mid   = iox.ReaderOptions{QueueDepth: 16, ChunkSize: 1 << 20}
	)
	sources := []struct {
		name string
		src  iox.Source
		opts []iox.ReaderOptions
	}{
		{"direct", file, []iox.ReaderOptions{def, small, mid}},
		{"buffered", buffered, []iox.ReaderOptions{def, small}},
		{"pattern", ioxtest.PatternSource{N: testFileSize}, []iox.ReaderOptions{mid}},
		{"faulty-short", ioxtest.NewFaultySource(buffered, ioxtest.Fault{Kind: ioxtest.Short, N: 700_001, Times: 40}), []iox.ReaderOptions{def}},
	}
	if file.Mode() != iox.ModeDirect {
		t.Logf("O_DIRECT unavailable in %s: %s", t.TempDir(), file.DirectFallback())
	}
	for _, s := range sources {
		for _, opts := range s.opts {
			t.Run(fmt.Sprintf("%s/qd%d/chunk%d", s.name, opts.QueueDepth, opts.ChunkSize), func(t *testing.T) {
				r := newReader(t, opts)
				for _, c := range exactCases(testFileSize) {
					readOne(t, r, s.src, c.off, c.n)
				}
				// A misaligned Dst is read buffered, at the same pad.
				raw := make([]byte, iox.WindowLen(12345, 100_000)+1)
				dst := raw[1:]
				p, err := r.Submit(context.Background(), iox.Request{Src: s.src, Off: 12345, Len: 100_000, Dst: dst}).Wait()
				if err != nil {
					t.Fatal(err)
				}
				checkPayload(t, p, dst, 12345, 100_000)
				st := r.Stats()
				if st.Failed != 0 || st.Completed != st.Requests {
					t.Fatalf("stats %+v", st)
				}
				if s.name == "direct" && file.Mode() == iox.ModeDirect {
					if st.DirectReads == 0 || st.MisalignedDst == 0 || st.Fallbacks != 0 {
						t.Fatalf("direct stats %+v", st)
					}
				}
			})
		}
	}
}

// TestAccounting checks the byte counts exactly: payload vs device bytes.
func TestAccounting(t *testing.T) {
	f := openPattern(t, testFileSize, iox.FileOptions{Direct: true})
	if f.Mode() != iox.ModeDirect {
		t.Skip("no O_DIRECT here")
	}
	r := newReader(t, iox.ReaderOptions{ChunkSize: 1 << 20})
	readOne(t, r, f, 100, 1632)             // window [0, 4096)
	readOne(t, r, f, 8192+4000, 1632)       // window [8192, 16384)
	readOne(t, r, f, testFileSize-10, 10)   // window from 40 MiB to EOF: 1234 bytes
	readOne(t, r, f, 4096*5+17, 17_547_264) // 4,285 blocks in 17 chunks
	st := r.Stats()
	wantReq := int64(1632 + 1632 + 10 + 17_547_264)
	wantRead := int64(4096 + 8192 + 1234 + 17_547_264 + 4096)
	if st.BytesRequested != wantReq || st.BytesRead != wantRead || st.BytesDirect != wantRead {
		t.Fatalf("requested %d read %d direct %d; want %d, %d", st.BytesRequested, st.BytesRead, st.BytesDirect, wantReq, wantRead)
	}
	if st.Requests != 4 || st.Chunks != 1+1+1+17 || st.Reads != st.Chunks || st.Retries != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.BusyTime <= 0 || st.ReadTime < st.BusyTime || st.MaxInFlight < 1 || st.InFlight != 0 {
		t.Fatalf("times %+v", st)
	}
	d := r.Stats().Sub(st)
	if d.Requests != 0 || d.BytesRead != 0 || d.BusyTime != 0 {
		t.Fatalf("Sub %+v", d)
	}
}

// tensor is one request of a batch laid out in an arena as a file image.
func arenaRequests(src iox.Source, arena []byte, arenaOff int64, spans []span) []iox.Request {
	reqs := make([]iox.Request, len(spans))
	for i, s := range spans {
		reqs[i] = iox.Request{Src: src, Off: s.off, Len: s.n, Dst: arena[iox.AlignDown(s.off)-arenaOff:]}
	}
	return reqs
}

func TestBatchCoalesce(t *testing.T) {
	f := openPattern(t, testFileSize, iox.FileOptions{Direct: true})
	// Six contiguous tensors of one expert-like run at an unaligned offset,
	// then two more after a gap larger than a block.
	run := []span{{5000, 1632}, {6632, 100}, {6732, 4096}, {10828, 70_000}, {80828, 1}, {80829, 300_000}}
	gap := []span{{1 << 20, 5000}, {1<<20 + 5000, 3}}
	all := append(append([]span{}, run...), gap...)
	for _, opts := range []iox.ReaderOptions{{}, {ChunkSize: 64 << 10, QueueDepth: 4}, {NoCoalesce: true}} {
		t.Run(fmt.Sprintf("chunk%d/nocoalesce=%v", opts.ChunkSize, opts.NoCoalesce), func(t *testing.T) {
			r := newReader(t, opts)
			arena := alignedDst(t, 0, 2<<20)
			reqs := arenaRequests(f, arena, 0, all)
			perm := rand.New(rand.NewPCG(1, 2)).Perm(len(reqs)) // submission order must not matter
			shuffled := make([]iox.Request, len(reqs))
			for i, j := range perm {
				shuffled[i] = reqs[j]
			}
			futs := r.SubmitBatch(context.Background(), shuffled)
			if err := iox.WaitAll(futs...); err != nil {
				t.Fatal(err)
			}
			for i, fu := range futs {
				q := shuffled[i]
				if fu.Request().Off != q.Off {
					t.Fatal("futures not in submission order")
				}
				checkPayload(t, fu.Payload(), q.Dst, q.Off, q.Len)
			}
			st := r.Stats()
			wantCoalesced := int64(len(run) - 1 + len(gap) - 1)
			if opts.NoCoalesce {
				wantCoalesced = 0
			}
			if st.Coalesced != wantCoalesced {
				t.Fatalf("coalesced %d, want %d", st.Coalesced, wantCoalesced)
			}
			if opts.ChunkSize == 0 && !opts.NoCoalesce && st.Chunks != 2 {
				t.Fatalf("chunks %d, want 2 (one per extent)", st.Chunks)
			}
			t.Logf("%d requests: %d chunks, %d reads, %d bytes read for %d requested", st.Requests, st.Chunks, st.Reads, st.BytesRead, st.BytesRequested)
		})
	}
}

// TestBatchMixed: several files, separate buffers (no coalescing), repeated
// and overlapping requests, invalid ones resolved at once.
func TestBatchMixed(t *testing.T) {
	f1 := openPattern(t, testFileSize, iox.FileOptions{Direct: true})
	f2 := openPattern(t, 3<<20+5, iox.FileOptions{Direct: true})
	ps := ioxtest.PatternSource{N: 1 << 20, Path: "mem"}
	r := newReader(t, iox.ReaderOptions{ChunkSize: 256 << 10, QueueDepth: 5})
	var reqs []iox.Request
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 60 {
		src := []iox.Source{f1, f2, ps}[i%3]
		n := 1 + rng.IntN(600_000)
		if i%7 == 0 {
			n = 1632
		}
		off := rng.Int64N(src.Size() - int64(n) + 1)
		reqs = append(reqs, iox.Request{Src: src, Off: off, Len: n, Dst: alignedDst(t, off, n)})
	}
	reqs = append(reqs, reqs[0], reqs[1]) // the same requests again, other buffers
	reqs[len(reqs)-1].Dst = alignedDst(t, reqs[1].Off, reqs[1].Len)
	reqs[len(reqs)-2].Dst = alignedDst(t, reqs[0].Off, reqs[0].Len)
	bad := []iox.Request{
		{Src: f1, Off: testFileSize - 10, Len: 11, Dst: alignedDst(t, 0, 8192)},
		{Src: f1, Off: 5000, Len: 5000, Dst: make([]byte, 5000)},
		{Src: nil, Off: 0, Len: 1},
		{Src: f2, Off: -1, Len: 1, Dst: make([]byte, 8192)},
	}
	var onDone atomic.Int64
	for i := range reqs {
		reqs[i].OnDone = func(*iox.Future) { onDone.Add(1) }
	}
	futs := r.SubmitBatch(context.Background(), append(reqs, bad...))
	for i, fu := range futs[:len(reqs)] {
		p, err := fu.Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkPayload(t, p, reqs[i].Dst, reqs[i].Off, reqs[i].Len)
	}
	wantErr := []error{iox.ErrOutOfRange, iox.ErrBadRequest, iox.ErrBadRequest, iox.ErrBadRequest}
	for i, fu := range futs[len(reqs):] {
		_, err := fu.Wait()
		if _, ok := errors.AsType[*iox.ReadError](err); !ok || !errors.Is(err, wantErr[i]) {
			t.Errorf("bad request %d: %v", i, err)
		}
		<-fu.Released()
	}
	if onDone.Load() != int64(len(reqs)) {
		t.Fatalf("OnDone called %d times, want %d", onDone.Load(), len(reqs))
	}
	st := r.Stats()
	if st.Coalesced != 0 || st.Failed != int64(len(bad)) || st.Completed != int64(len(reqs)) {
		t.Fatalf("stats %+v", st)
	}
}

// TestFaults runs the generic path through injected faults.
func TestFaults(t *testing.T) {
	ps := ioxtest.PatternSource{N: 8 << 20, Path: "/models/k3/model-00042-of-00096.safetensors"}
	t.Run("short", func(t *testing.T) {
		src := ioxtest.NewFaultySource(ps, ioxtest.Fault{Kind: ioxtest.Short, N: 1000})
		r := newReader(t, iox.ReaderOptions{})
		readOne(t, r, src, 12345, 100_000)
		if st := r.Stats(); st.Retries < 99 || st.Reads != st.Retries+1 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("short-zero", func(t *testing.T) {
		src := ioxtest.NewFaultySource(ps, ioxtest.Fault{Kind: ioxtest.Short, N: 0, Times: 5}, ioxtest.Fault{Kind: ioxtest.Fail, Err: syscall.EAGAIN, Times: 5})
		r := newReader(t, iox.ReaderOptions{})
		readOne(t, r, src, 1, 3)
	})
	t.Run("eintr", func(t *testing.T) {
		src := ioxtest.NewFaultySource(ps, ioxtest.Fault{Kind: ioxtest.Fail, Err: syscall.EINTR, Times: 3})
		r := newReader(t, iox.ReaderOptions{QueueDepth: 1})
		readOne(t, r, src, 4096, 1<<20)
		if st := r.Stats(); st.Retries != 3 || st.Reads != 4 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("eintr-forever", func(t *testing.T) {
		src := ioxtest.NewFaultySource(ps, ioxtest.Fault{Kind: ioxtest.Fail, Err: syscall.EINTR})
		r := newReader(t, iox.ReaderOptions{})
		_, err := r.Submit(context.Background(), iox.Request{Src: src, Off: 0, Len: 10, Dst: alignedDst(t, 0, 10)}).Wait()
		if !errors.Is(err, syscall.EINTR) || !strings.Contains(err.Error(), "gave up") && !strings.Contains(err.Error(), "no progress") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("eio", func(t *testing.T) {
		src := ioxtest.NewFaultySource(ps, ioxtest.Fault{Kind: ioxtest.Fail, Off: 3 << 20, End: 3<<20 + 1})
		r := newReader(t, iox.ReaderOptions{ChunkSize: 1 << 20})
		reqs := []iox.Request{
			{Src: src, Off: 2<<20 + 100, Len: 2 << 20, Dst: alignedDst(t, 2<<20+100, 2<<20)}, // covers the bad byte
			{Src: src, Off: 0, Len: 1 << 20, Dst: alignedDst(t, 0, 1<<20)},
			{Src: src, Off: 5 << 20, Len: 1 << 20, Dst: alignedDst(t, 5<<20, 1<<20)},
		}
		futs := r.SubmitBatch(context.Background(), reqs)
		_, err := futs[0].Wait()
		re, ok := errors.AsType[*iox.ReadError](err)
		if !ok || re.File != ps.Path || re.Off != 2<<20+100 || re.Len != 2<<20 || !errors.Is(err, syscall.EIO) {
			t.Fatalf("err = %#v", err)
		}
		msg := err.Error()
		for _, want := range []string{ps.Path, "offset 2097252", "length 2097152", "offset 3145728", "input/output error"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		t.Logf("example: %v", err)
		for i, fu := range futs[1:] {
			p, err := fu.Wait()
			if err != nil {
				t.Fatal(err)
			}
			checkPayload(t, p, reqs[i+1].Dst, reqs[i+1].Off, reqs[i+1].Len)
		}
		iox.WaitReleased(futs...)
		if st := r.Stats(); st.Failed != 1 || st.Completed != 2 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("eof-early", func(t *testing.T) {
		// The source claims 8 MiB but ends at 1 MiB, as a truncated file.
		src := ioxtest.NewFaultySource(ioxtest.PatternSource{N: 1 << 20})
		lying := iox.NewSource(src, 8<<20, "lying")
		r := newReader(t, iox.ReaderOptions{})
		_, err := r.Submit(context.Background(), iox.Request{Src: lying, Off: 1<<20 - 10, Len: 20, Dst: alignedDst(t, 1<<20-10, 20)}).Wait()
		if re, ok := errors.AsType[*iox.ReadError](err); !ok || re.File != "lying" || !strings.Contains(err.Error(), "ended at offset 1048576") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestNoLeakRealFiles: many reads, a cancelled batch, then Close: the
// goroutine count returns to where it was and the buffers can be freed.
func TestNoLeakRealFiles(t *testing.T) {
	f := openPattern(t, testFileSize, iox.FileOptions{Direct: true})
	base := runtime.NumGoroutine()
	bytesBefore := iox.AllocatedBytes()
	r, err := iox.NewReader(iox.ReaderOptions{QueueDepth: 16, ChunkSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := iox.AllocAligned(testFileSize+iox.Align, iox.BufferOptions{HugePages: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fu := r.Submit(ctx, iox.Request{Src: f, Off: 3, Len: testFileSize - 3, Dst: buf.Bytes()})
	cancel()
	if _, err := fu.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	<-fu.Released()
	fu = r.Submit(context.Background(), iox.Request{Src: f, Off: 3, Len: testFileSize - 3, Dst: buf.Bytes()})
	p, err := fu.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := ioxtest.CheckPattern(p, 3); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Submit(context.Background(), iox.Request{Src: f, Off: 0, Len: 1, Dst: buf.Bytes()}).Wait(); !errors.Is(err, iox.ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	buf.Free()
	if iox.AllocatedBytes() != bytesBefore {
		t.Fatal("buffer bytes not returned")
	}
	checkNoLeak(t, base)
}

func TestNewReaderOptions(t *testing.T) {
	for _, o := range []iox.ReaderOptions{{QueueDepth: -1}, {QueueDepth: iox.MaxQueueDepth + 1}, {ChunkSize: -5}, {ChunkSize: iox.MaxChunkSize + 1}} {
		if _, err := iox.NewReader(o); err == nil {
			t.Errorf("NewReader(%+v) succeeded", o)
		}
	}
	r := newReader(t, iox.ReaderOptions{ChunkSize: 5000})
	if r.ChunkSize() != 8192 || r.QueueDepth() != iox.DefaultQueueDepth {
		t.Fatalf("chunk %d qd %d", r.ChunkSize(), r.QueueDepth())
	}
}
