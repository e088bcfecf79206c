package prefix

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"testing"
)

// validEntryFile returns the bytes of an entry file as a store writes it.
func validEntryFile(t testing.TB, size int64, sections []int64) (Key, []byte) {
	s := openStore(t, withRAM(0))
	k, m := testKey(s.Hasher(), 1, 11, size)
	m.Sections, m.HasLogits = sections, true
	putContent(t, s, k, m)
	b, err := os.ReadFile(s.path(k))
	if err != nil {
		t.Fatal(err)
	}
	return k, b
}

// FuzzParseHeader: the header parser never panics, and a header it
// accepts encodes back to the same bytes.
func FuzzParseHeader(f *testing.F) {
	_, b := validEntryFile(f, 100, []int64{60, 40})
	f.Add(b[:headerRegion])
	f.Add(b[:maxHeader])
	f.Add(b[:fixedHeader])
	f.Add([]byte{})
	f.Add([]byte("k3prefix\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := parseHeader(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if err := h.meta.check(h.blockSize); err != nil {
			t.Fatalf("accepted an invalid meta: %v", err)
		}
		hl := int(binary.LittleEndian.Uint32(data[12:]))
		out := make([]byte, headerRegion)
		if n := h.encode(out); n != hl || !bytes.Equal(out[:n], data[:hl]) {
			t.Fatalf("re-encoded header differs")
		}
	})
}

// FuzzEntryFile: arbitrary bytes under an entry's name go through the
// whole read path (scan, Get, Read, Close). Nothing panics; an error is
// ErrCorrupt or ErrNotFound; and what a Reader delivers with a nil Close
// is exactly the payload of a well-formed file (its length and CRC-32C
// checked here independently).
func FuzzEntryFile(f *testing.F) {
	k, b := validEntryFile(f, 300, []int64{100, 200})
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add(b[:headerRegion])
	f.Add(append(bytes.Clone(b), 0))
	flipped := bytes.Clone(b)
	flipped[headerRegion+7] ^= 4
	f.Add(flipped)
	f.Add([]byte{})
	_, empty := validEntryFile(f, 0, nil)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		s0 := openStore(t, withRAM(0), withDir(dir))
		if err := os.WriteFile(s0.path(k), data, 0o644); err != nil {
			t.Fatal(err)
		}
		s := openStore(t, withRAM(1<<20), withDir(dir)) // scans the file
		r, err := s.Get(k)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get: %v", err)
			}
			return
		}
		got, rerr := io.ReadAll(r)
		cerr := r.Close()
		if (rerr == nil) != (cerr == nil) {
			t.Fatalf("ReadAll %v but Close %v", rerr, cerr)
		}
		if cerr != nil {
			if !errors.Is(cerr, ErrCorrupt) {
				t.Fatalf("Close: %v", cerr)
			}
			return
		}
		if len(data) < headerRegion {
			t.Fatalf("accepted a %d-byte file", len(data))
		}
		payload := data[headerRegion:]
		if int64(len(payload)) != r.Meta().Size || !bytes.Equal(got, payload) {
			t.Fatalf("delivered %d bytes, file payload %d", len(got), len(payload))
		}
		if crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(data[144:]) {
			t.Fatal("delivered a payload whose checksum does not match")
		}
	})
}
