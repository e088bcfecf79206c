package iox_test

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/k3go/k3/internal/platform/sysinfo"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/iox/ioxtest"
)

// testFileSize is not a multiple of 4096, so the last window crosses EOF,
// and is large enough for an expert-sized read at an unaligned offset.
const testFileSize = 20<<20 + 1234

// openPattern writes a pattern file of size bytes and opens it.
func openPattern(t testing.TB, size int64, opts iox.FileOptions) *iox.File {
	t.Helper()
	path := ioxtest.WritePatternFile(t, t.TempDir(), "pattern.bin", size)
	f, err := iox.OpenFile(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// alignedDst allocates an aligned buffer holding the window of (off, n).
func alignedDst(t testing.TB, off int64, n int) []byte {
	t.Helper()
	b, err := iox.AllocAligned(max(iox.WindowLen(off, n), 1), iox.BufferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b.Bytes()
}

func newReader(t testing.TB, opts iox.ReaderOptions) *iox.Reader {
	t.Helper()
	r, err := iox.NewReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// readOne reads (off, n) of src into a fresh aligned buffer and checks the
// payload against the pattern and the window layout.
func readOne(t *testing.T, r *iox.Reader, src iox.Source, off int64, n int) {
	t.Helper()
	dst := alignedDst(t, off, n)
	p, err := r.Submit(context.Background(), iox.Request{Src: src, Off: off, Len: n, Dst: dst}).Wait()
	if err != nil {
		t.Fatalf("read (%d, %d): %v", off, n, err)
	}
	checkPayload(t, p, dst, off, n)
}

func checkPayload(t *testing.T, p, dst []byte, off int64, n int) {
	t.Helper()
	if len(p) != n {
		t.Fatalf("read (%d, %d): payload length %d", off, n, len(p))
	}
	if n > 0 && &p[0] != &dst[off%iox.Align] {
		t.Fatalf("read (%d, %d): payload not at Dst[pad]", off, n)
	}
	if want := patternData(); off+int64(n) <= int64(len(want)) && bytes.Equal(p, want[off:off+int64(n)]) {
		return // fast path, also under the race detector
	}
	if err := ioxtest.CheckPattern(p, off); err != nil {
		t.Fatalf("read (%d, %d): %v", off, n, err)
	}
}

// patternData is the pattern of a testFileSize file, computed once.
var patternData = sync.OnceValue(func() []byte {
	b := make([]byte, testFileSize)
	ioxtest.FillPattern(b, 0)
	return b
})

// checkNoLeak waits for the goroutine count to come back to base.
func checkNoLeak(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, want ≤ %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fsType(t testing.TB, dir string) string {
	ds, err := sysinfo.FreeSpace(dir)
	if err != nil {
		return "?"
	}
	return ds.FSType
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
