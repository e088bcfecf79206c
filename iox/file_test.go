package iox_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/iox/ioxtest"
)

// TestDirectMode reports which mode the test directory and /dev/shm get;
// where O_DIRECT is available, the Reader must actually use it.
func TestDirectMode(t *testing.T) {
	dirs := []string{t.TempDir()}
	if wd, err := os.Getwd(); err == nil {
		d, err := os.MkdirTemp(wd, ".iox-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs = append(dirs, d)
		}
	}
	if exists("/dev/shm") {
		if d, err := os.MkdirTemp("/dev/shm", "iox-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			dirs = append(dirs, d)
		}
	}
	for _, dir := range dirs {
		path := ioxtest.WritePatternFile(t, dir, "f", 1<<20+7)
		f, err := iox.OpenFile(path, iox.FileOptions{Direct: true})
		if err != nil {
			t.Fatal(err)
		}
		r := newReader(t, iox.ReaderOptions{})
		readOne(t, r, f, 4097, 100_000)
		st := r.Stats()
		t.Logf("%s (%s): mode %v %s; direct reads %d of %d", dir, fsType(t, dir), f.Mode(), f.DirectFallback(), st.DirectReads, st.Reads)
		switch f.Mode() {
		case iox.ModeDirect:
			if st.DirectReads == 0 || st.DirectReads != st.Reads {
				t.Errorf("%s: mode direct but %d of %d reads direct", dir, st.DirectReads, st.Reads)
			}
		case iox.ModeBuffered:
			if f.DirectFallback() == "" {
				t.Errorf("%s: buffered without a reason", dir)
			}
		}
		f.Close()
	}
}

func TestForcedFallbackAtOpen(t *testing.T) {
	f := openPattern(t, 1<<20, iox.WithDirectRefused(iox.FileOptions{Direct: true}, syscall.EINVAL))
	if f.Mode() != iox.ModeBuffered || !strings.Contains(f.DirectFallback(), "invalid argument") {
		t.Fatalf("mode %v, fallback %q", f.Mode(), f.DirectFallback())
	}
	r := newReader(t, iox.ReaderOptions{})
	readOne(t, r, f, 12345, 1632)
	readOne(t, r, f, 0, 1<<20)
	if st := r.Stats(); st.DirectReads != 0 || st.Fallbacks != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestForcedFallbackAtFirstRead: the file system accepts the O_DIRECT open
// but refuses the read (EINVAL), as some FUSE and network file systems do.
func TestForcedFallbackAtFirstRead(t *testing.T) {
	hook := func(pread func(int, []byte, int64) (int, error), fd int, p []byte, off int64) (int, error) {
		return 0, syscall.EINVAL
	}
	f := openPattern(t, 8<<20, iox.WithPread(iox.FileOptions{Direct: true}, hook))
	if f.Mode() != iox.ModeDirect {
		t.Skipf("no O_DIRECT here: %s", f.DirectFallback())
	}
	r := newReader(t, iox.ReaderOptions{QueueDepth: 4, ChunkSize: 1 << 20})
	readOne(t, r, f, 777, 5<<20)
	if f.Mode() != iox.ModeBuffered || !strings.Contains(f.DirectFallback(), "first O_DIRECT read") {
		t.Fatalf("mode %v, fallback %q", f.Mode(), f.DirectFallback())
	}
	readOne(t, r, f, 8<<20-1632, 1632)
	st := r.Stats()
	if st.Fallbacks != 1 || st.BytesDirect != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDirectRetries drives the O_DIRECT loop through EINTR and short,
// unaligned reads (which the kernel returns only at EOF, but the loop must
// survive anywhere by restarting at the block boundary).
func TestDirectRetries(t *testing.T) {
	calls := 0
	hook := func(pread func(int, []byte, int64) (int, error), fd int, p []byte, off int64) (int, error) {
		calls++ // one worker: no race
		if calls%3 == 1 {
			return -1, syscall.EINTR
		}
		n, err := pread(fd, p[:min(len(p), 4*4096)], off)
		return min(n, 3*4096+1000), err // short, unaligned
	}
	f := openPattern(t, 4<<20+99, iox.WithPread(iox.FileOptions{Direct: true}, hook))
	if f.Mode() != iox.ModeDirect {
		t.Skipf("no O_DIRECT here: %s", f.DirectFallback())
	}
	r := newReader(t, iox.ReaderOptions{QueueDepth: 1})
	readOne(t, r, f, 5000, 200_000)
	readOne(t, r, f, 4<<20+99-70_000, 70_000) // to EOF
	st := r.Stats()
	if st.Retries < 10 || st.DirectReads != st.Reads {
		t.Fatalf("stats %+v", st)
	}
}

func TestDirectEIO(t *testing.T) {
	hook := func(pread func(int, []byte, int64) (int, error), fd int, p []byte, off int64) (int, error) {
		if off <= 2<<20 && 2<<20 < off+int64(len(p)) {
			return -1, syscall.EIO
		}
		return pread(fd, p, off)
	}
	f := openPattern(t, 4<<20, iox.WithPread(iox.FileOptions{Direct: true}, hook))
	if f.Mode() != iox.ModeDirect {
		t.Skipf("no O_DIRECT here: %s", f.DirectFallback())
	}
	r := newReader(t, iox.ReaderOptions{ChunkSize: 1 << 20})
	dst := alignedDst(t, 1<<20+5, 2<<20)
	_, err := r.Submit(context.Background(), iox.Request{Src: f, Off: 1<<20 + 5, Len: 2 << 20, Dst: dst}).Wait()
	re, ok := errors.AsType[*iox.ReadError](err)
	if !ok || !errors.Is(err, syscall.EIO) || re.File != f.Name() || re.Off != 1<<20+5 || re.Len != 2<<20 {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), f.Name()) || !strings.Contains(err.Error(), "offset 2097152") {
		t.Fatalf("message %q lacks the file or the failing offset", err)
	}
	readOne(t, r, f, 0, 1<<20) // other ranges still read
}

// TestTruncatedAfterOpen: reads past the new end fail naming the file and
// the change; reads before it succeed; CheckSize reports it.
func TestTruncatedAfterOpen(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(map[bool]string{true: "direct", false: "buffered"}[direct], func(t *testing.T) {
			const size, newSize = 1<<20 + 100, 300_000 // the new end is mid-block
			f := openPattern(t, size, iox.FileOptions{Direct: direct})
			if err := f.CheckSize(); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f.Name(), newSize); err != nil {
				t.Fatal(err)
			}
			err := f.CheckSize()
			if !errors.Is(err, iox.ErrFileChanged) || !strings.Contains(err.Error(), "size 1048676 bytes at open, now 300000") {
				t.Fatalf("CheckSize = %v", err)
			}
			if f.Size() != size {
				t.Fatal("Size changed")
			}
			r := newReader(t, iox.ReaderOptions{})
			readOne(t, r, f, 299_000, 1000) // ends exactly at the new end
			readOne(t, r, f, 0, newSize)
			for _, c := range []struct {
				off int64
				n   int
			}{{500_000, 1000}, {299_500, 1000}, {0, newSize + 1}, {newSize, 1}} {
				_, err := r.Submit(context.Background(), iox.Request{Src: f, Off: c.off, Len: c.n, Dst: alignedDst(t, c.off, c.n)}).Wait()
				re, ok := errors.AsType[*iox.ReadError](err)
				if !ok || re.Off != c.off || re.Len != c.n || !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, iox.ErrFileChanged) {
					t.Fatalf("read (%d, %d): %v", c.off, c.n, err)
				}
				if !strings.Contains(err.Error(), f.Name()) {
					t.Fatalf("message %q lacks the file name", err)
				}
			}
			if t.Name() == "TestTruncatedAfterOpen/direct" {
				t.Logf("example: %v", func() error {
					_, err := r.Submit(context.Background(), iox.Request{Src: f, Off: 500_000, Len: 1000, Dst: alignedDst(t, 500_000, 1000)}).Wait()
					return err
				}())
			}
		})
	}
}

func TestCheckSizeModified(t *testing.T) {
	f := openPattern(t, 64<<10, iox.FileOptions{})
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(f.Name(), later, later); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckSize(); !errors.Is(err, iox.ErrFileChanged) || !strings.Contains(err.Error(), "modified") {
		t.Fatalf("CheckSize = %v", err)
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := iox.OpenFile(filepath.Join(dir, "missing"), iox.FileOptions{Direct: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := iox.OpenFile(dir, iox.FileOptions{}); err == nil {
		t.Fatal("opened a directory")
	}
	f := openPattern(t, 10_000, iox.FileOptions{Direct: true, Random: true})
	buf := make([]byte, 100)
	if n, err := f.ReadAt(buf, 9950); n != 50 || err != io.EOF {
		t.Fatalf("ReadAt at the end: %d, %v", n, err)
	}
	if err := ioxtest.CheckPattern(buf[:50], 9950); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, iox.ErrClosed) {
		t.Fatalf("ReadAt after Close: %v", err)
	}
	r := newReader(t, iox.ReaderOptions{})
	_, err := r.Submit(context.Background(), iox.Request{Src: f, Off: 0, Len: 10, Dst: alignedDst(t, 0, 10)}).Wait()
	if !errors.Is(err, iox.ErrClosed) {
		t.Fatalf("Reader on a closed file: %v", err)
	}
}
