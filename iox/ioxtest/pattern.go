// Package ioxtest provides test doubles for package iox: a [FaultySource]
// that injects short reads, errors, delays and hangs into any iox.Source,
// and a deterministic byte pattern to check reads byte for byte.
package ioxtest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// patternWord is splitmix64 of the word index: every 8-byte word differs,
// with no period that an alignment bug could hide behind.
func patternWord(w uint64) uint64 {
	z := w + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// PatternByte returns the pattern's byte at file offset off.
func PatternByte(off int64) byte {
	return byte(patternWord(uint64(off)>>3) >> (8 * (uint64(off) & 7)))
}

// FillPattern writes the pattern for offsets [off, off+len(p)) into p.
func FillPattern(p []byte, off int64) {
	i := 0
	for i < len(p) && (off+int64(i))&7 != 0 {
		p[i] = PatternByte(off + int64(i))
		i++
	}
	for ; i+8 <= len(p); i += 8 {
		w := patternWord(uint64(off+int64(i)) >> 3)
		_ = p[i+7]
		p[i], p[i+1], p[i+2], p[i+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
		p[i+4], p[i+5], p[i+6], p[i+7] = byte(w>>32), byte(w>>40), byte(w>>48), byte(w>>56)
	}
	for ; i < len(p); i++ {
		p[i] = PatternByte(off + int64(i))
	}
}

// CheckPattern returns an error naming the first byte of p that differs
// from the pattern at offsets [off, off+len(p)).
func CheckPattern(p []byte, off int64) error {
	want := make([]byte, 64<<10)
	for i := 0; i < len(p); i += len(want) {
		n := min(len(want), len(p)-i)
		FillPattern(want[:n], off+int64(i))
		if bytes.Equal(p[i:i+n], want[:n]) {
			continue
		}
		for j := range n {
			if p[i+j] != want[j] {
				return fmt.Errorf("byte at offset %d (index %d): got %#02x, want %#02x", off+int64(i+j), i+j, p[i+j], want[j])
			}
		}
	}
	return nil
}

// PatternSource is an in-memory iox.Source of Size pattern bytes, computed
// on the fly (no memory is held).
type PatternSource struct {
	N    int64
	Path string
}

// ReadAt implements io.ReaderAt.
func (s PatternSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	if off >= s.N {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), s.N-off))
	FillPattern(p[:n], off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Size returns N.
func (s PatternSource) Size() int64 { return s.N }

// Name returns Path, or "pattern" if it is empty.
func (s PatternSource) Name() string {
	if s.Path == "" {
		return "pattern"
	}
	return s.Path
}

// WritePatternFile writes a file of size pattern bytes named name in dir
// and returns its path.
func WritePatternFile(tb testing.TB, dir, name string, size int64) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := int(min(int64(len(buf)), size-off))
		FillPattern(buf[:n], off)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			tb.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}
