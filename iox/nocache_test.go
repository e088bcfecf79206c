//go:build unix

package iox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3go/k3/iox"
)

// TestNoCacheCountsAsDirect runs macOS's uncached descriptor (a plain
// descriptor plus a hint, F_NOCACHE there; a recorder here) on this Unix
// and checks that its reads are counted exactly as O_DIRECT reads are on
// Linux: the same Stats for the same requests, every aligned read direct.
func TestNoCacheCountsAsDirect(t *testing.T) {
	var hinted atomic.Int32
	hint := func(fd int) error {
		if fd < 0 {
			return errors.New("bad descriptor")
		}
		hinted.Add(1)
		return nil
	}
	nc := openPattern(t, testFileSize, iox.WithNoCacheHint(iox.FileOptions{Direct: true}, hint))
	if nc.Mode() != iox.ModeDirect || nc.DirectFallback() != "" || hinted.Load() != 1 {
		t.Fatalf("mode %v, fallback %q, hint applied %d times", nc.Mode(), nc.DirectFallback(), hinted.Load())
	}
	reads := func(f *iox.File) iox.Stats {
		r := newReader(t, iox.ReaderOptions{QueueDepth: 1, ChunkSize: 1 << 20})
		readOne(t, r, f, 0, 4096)
		readOne(t, r, f, 4097, 100_000)
		readOne(t, r, f, 5000, iox.ExpertBytes)
		readOne(t, r, f, testFileSize-1234, 1234) // to EOF, mid-block
		// A Dst that is not aligned is read buffered, and counted so.
		dst := make([]byte, iox.WindowLen(12345, 1000)+1)
		if iox.IsAligned(dst[1:]) {
			dst = dst[:len(dst)-1]
		} else {
			dst = dst[1:]
		}
		p, err := r.Submit(context.Background(), iox.Request{Src: f, Off: 12345, Len: 1000, Dst: dst}).Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkPayload(t, p, dst, 12345, 1000)
		return r.Stats()
	}
	st := reads(nc)
	if st.DirectReads == 0 || st.BytesDirect == 0 || st.DirectReads != st.Reads-st.MisalignedDst || st.BytesDirect != st.BytesRead-1000 || st.MisalignedDst != 1 {
		t.Fatalf("uncached descriptor's stats: %+v", st)
	}

	od := openPattern(t, testFileSize, iox.FileOptions{Direct: true})
	if od.Mode() != iox.ModeDirect {
		t.Logf("no O_DIRECT here (%s): not compared", od.DirectFallback())
		return
	}
	ost := reads(od)
	if st.Reads != ost.Reads || st.DirectReads != ost.DirectReads || st.BytesRead != ost.BytesRead ||
		st.BytesDirect != ost.BytesDirect || st.MisalignedDst != ost.MisalignedDst || st.Retries != ost.Retries {
		t.Fatalf("uncached descriptor %+v\nO_DIRECT          %+v", st, ost)
	}
}

// TestNoCacheRefused: a hint the file system refuses leaves the file
// buffered, with the reason.
func TestNoCacheRefused(t *testing.T) {
	hint := func(int) error { return errors.New("fcntl F_NOCACHE: operation not supported") }
	f := openPattern(t, 1<<20, iox.WithNoCacheHint(iox.FileOptions{Direct: true}, hint))
	if f.Mode() != iox.ModeBuffered || !strings.Contains(f.DirectFallback(), "F_NOCACHE") {
		t.Fatalf("mode %v, fallback %q", f.Mode(), f.DirectFallback())
	}
	r := newReader(t, iox.ReaderOptions{})
	readOne(t, r, f, 777, 300_000)
	if st := r.Stats(); st.DirectReads != 0 || st.Reads == 0 {
		t.Fatalf("stats %+v", st)
	}
}
