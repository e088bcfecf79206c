package iox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/iox/ioxtest"
)

// callRecorder is a Source of pattern bytes that records every ReadAt
// call's offset and length.
type callRecorder struct {
	ioxtest.PatternSource
	mu    sync.Mutex
	calls [][2]int64 // off, len
}

func (s *callRecorder) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	s.calls = append(s.calls, [2]int64{off, int64(len(p))})
	s.mu.Unlock()
	return s.PatternSource.ReadAt(p, off)
}

// checkCalls checks that calls, sorted as one worker issues them, tile
// [lo, hi) in pieces of at most limit bytes, and that there are want.
func checkCalls(t *testing.T, calls [][2]int64, lo, hi, limit int64, want int) {
	t.Helper()
	if len(calls) != want {
		t.Errorf("%d read calls for [%d, %d), want %d: %v", len(calls), lo, hi, want, calls)
	}
	pos := lo
	for _, c := range calls {
		if c[0] != pos || c[1] <= 0 || c[1] > limit {
			t.Fatalf("call (off %d, len %d) after %d: not contiguous or above the %d-byte limit; calls %v", c[0], c[1], pos, limit, calls)
		}
		pos += c[1]
	}
	if pos != hi {
		t.Fatalf("calls end at %d, want %d", pos, hi)
	}
}

// readCallCases are the reads of TestReadCallSplit, scaled down 1024
// times so that no test buffer is near 2 GiB: the injected limit is
// 2 MiB − 4 KiB, where the real one (MaxReadCall) is 2 GiB − 4 KiB.
var readCallCases = []struct {
	name string
	n    int
}{
	{"one call exactly", 2<<20 - 4096},
	{"one byte over", 2<<20 - 4096 + 1},
	{"2 GiB", 2 << 20},
	{"lm_head, 2.35 GB", 2_350_000},
	{"5 GiB", 5 << 20},
}

const scaledLimit = 2<<20 - 4096

// TestMaxReadCall: the real per-call limit is below 2 GiB (macOS refuses
// INT_MAX+1 bytes), a multiple of Align (so split O_DIRECT reads stay
// aligned), and no smaller than a chunk.
func TestMaxReadCall(t *testing.T) {
	if iox.MaxReadCall >= 1<<31 || iox.MaxReadCall%iox.Align != 0 || iox.MaxReadCall < iox.MaxChunkSize {
		t.Fatalf("MaxReadCall %d", iox.MaxReadCall)
	}
}

// TestReadCallSplit reads ranges of 2 GiB and more (scaled, see
// readCallCases) through a Source and checks that every read call stays
// within the limit, that the calls tile the range, and the bytes. The
// source is 4 GiB (virtual: its bytes are computed), and the reads sit
// above 3 GiB, so offsets past 2³¹ are exercised too.
func TestReadCallSplit(t *testing.T) {
	for _, c := range readCallCases {
		t.Run(c.name, func(t *testing.T) {
			src := &callRecorder{PatternSource: ioxtest.PatternSource{N: 4 << 30}}
			r := newReader(t, iox.WithMaxReadCall(iox.ReaderOptions{QueueDepth: 1, ChunkSize: 16 << 20}, scaledLimit))
			off := int64(3<<30 + 777)
			dst := make([]byte, iox.WindowLen(off, c.n))
			p, err := r.Submit(context.Background(), iox.Request{Src: src, Off: off, Len: c.n, Dst: dst}).Wait()
			if err != nil {
				t.Fatal(err)
			}
			if err := ioxtest.CheckPattern(p, off); err != nil {
				t.Fatal(err)
			}
			want := (c.n + scaledLimit - 1) / scaledLimit
			checkCalls(t, src.calls, off, off+int64(c.n), scaledLimit, want)
			if st := r.Stats(); st.Reads != int64(want) || st.Retries != 0 || st.BytesRead != int64(c.n) {
				t.Errorf("stats: %d reads, %d retries, %d bytes; want %d, 0, %d", st.Reads, st.Retries, st.BytesRead, want, c.n)
			}
		})
	}
}

// TestReadCallSplitDirect is TestReadCallSplit on the O_DIRECT path (or
// F_NOCACHE's, see TestNoCacheCountsAsDirect): the window is read in
// aligned calls of at most the limit.
func TestReadCallSplitDirect(t *testing.T) {
	var (
		mu    sync.Mutex
		calls [][2]int64
	)
	hook := func(pread func(int, []byte, int64) (int, error), fd int, p []byte, off int64) (int, error) {
		mu.Lock()
		calls = append(calls, [2]int64{off, int64(len(p))})
		mu.Unlock()
		return pread(fd, p, off)
	}
	const size = 6<<20 + 1234
	f := openPattern(t, size, iox.WithPread(iox.FileOptions{Direct: true}, hook))
	if f.Mode() != iox.ModeDirect {
		t.Skipf("no O_DIRECT here: %s", f.DirectFallback())
	}
	for _, c := range readCallCases {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			calls = nil
			mu.Unlock()
			r := newReader(t, iox.WithMaxReadCall(iox.ReaderOptions{QueueDepth: 1, ChunkSize: 16 << 20}, scaledLimit))
			off := int64(1000)
			readOne(t, r, f, off, c.n)
			start, wl, _ := iox.Window(off, c.n)
			want := (wl + scaledLimit - 1) / scaledLimit
			mu.Lock()
			defer mu.Unlock()
			checkCalls(t, calls, start, start+int64(wl), scaledLimit, want)
			for _, cl := range calls {
				if cl[0]%iox.Align != 0 {
					t.Fatalf("unaligned direct call at %d", cl[0])
				}
			}
			if st := r.Stats(); st.DirectReads != int64(want) || st.Reads != st.DirectReads || st.Retries != 0 {
				t.Errorf("stats: %d reads, %d direct, %d retries; want %d direct, no retry", st.Reads, st.DirectReads, st.Retries, want)
			}
		})
	}
}
