package prefix

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"
)

const badSize = 3000

// writeEntry puts one state entry into a fresh directory through a
// disk-only store and returns the directory, the key and the file path.
func writeEntry(t *testing.T, fp string) (dir string, k Key, path string) {
	t.Helper()
	dir = t.TempDir()
	s := openStore(t, withRAM(0), withDir(dir), withFP(fp))
	k, m := testKey(mustHasher(t, testFP, testB), 1, 11, badSize)
	m.Sections = []int64{1000, 2000}
	if !putContent(t, s, k, m) {
		t.Fatal("not stored")
	}
	path = s.path(k)
	s.Close()
	return dir, k, path
}

func editFile(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func flip(off int) func([]byte) []byte {
	return func(b []byte) []byte { b[off] ^= 0x10; return b }
}

// setVersion rewrites the format version and re-seals the header, as a
// build of that version would have written it.
func setVersion(v uint32) func([]byte) []byte {
	return func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[8:], v)
		hl := binary.LittleEndian.Uint32(b[12:])
		binary.LittleEndian.PutUint32(b[hl-4:], crc32.Checksum(b[:hl-4], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
}

// TestBadEntriesAtOpen: files whose header region is wrong are removed
// when a store opens the directory, and never found.
func TestBadEntriesAtOpen(t *testing.T) {
	cases := map[string]func([]byte) []byte{
		"magic":          flip(0),
		"version byte":   flip(9),
		"header length":  flip(12),
		"fingerprint":    flip(20),
		"key":            flip(50),
		"kind":           flip(80),
		"flags":          flip(81),
		"tail":           flip(84),
		"anchor":         flip(100),
		"position":       flip(125),
		"saves":          flip(130),
		"size":           flip(137),
		"payload crc":    flip(146),
		"block size":     flip(149),
		"section":        flip(fixedHeader + 1),
		"header crc":     flip(fixedHeader + 16 + 1),
		"padding":        flip(3000),
		"older format":   setVersion(0),
		"zero length":    func([]byte) []byte { return nil },
		"header only":    func(b []byte) []byte { return b[:headerRegion] },
		"torn header":    func(b []byte) []byte { return b[:100] },
		"truncated by 1": func(b []byte) []byte { return b[:len(b)-1] },
		"one byte more":  func(b []byte) []byte { return append(b, 0) },
		"no header": func(b []byte) []byte { // payload written, header not yet
			clear(b[:headerRegion])
			return b
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			dir, k, path := writeEntry(t, testFP)
			editFile(t, path, corrupt)
			s := openStore(t, withDir(dir))
			if s.Has(k) {
				t.Fatal("bad entry indexed")
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("bad file not removed: %v", err)
			}
			if st := s.Stats(); st.BadEntries != 1 || st.DiskEntries != 0 || st.DiskBytes != 0 {
				t.Fatalf("stats %+v", st)
			}
			if _, err := s.Get(k); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get: %v", err)
			}
		})
	}
}

// TestBadEntryOnGet: a file that goes bad after the store indexed it is
// caught by Get.
func TestBadEntryOnGet(t *testing.T) {
	dir, k, path := writeEntry(t, testFP)
	s := openStore(t, withDir(dir), withRAM(0))
	if !s.Has(k) {
		t.Fatal("not indexed")
	}
	editFile(t, path, flip(40))
	if _, err := s.Get(k); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) || s.Has(k) {
		t.Fatalf("bad file kept: %v", err)
	}
	if st := s.Stats(); st.BadEntries != 1 || st.GetMisses != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBadPayload: a flipped payload byte passes the header checks and is
// caught when the payload has been read: Read and Close report it, the
// file is removed.
func TestBadPayload(t *testing.T) {
	for _, off := range []int{headerRegion, headerRegion + badSize/2, headerRegion + badSize - 1} {
		dir, k, path := writeEntry(t, testFP)
		editFile(t, path, flip(off))
		s := openStore(t, withDir(dir))
		if !s.Has(k) {
			t.Fatal("entry with a good header not indexed")
		}
		r, err := s.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, badSize)
		io.ReadFull(r, buf) // drops an error that arrives with the last bytes
		if _, err := r.Read(buf); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Read at the end: %v", err)
		}
		if err := r.Close(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Close: %v", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) || s.Has(k) {
			t.Fatalf("bad file kept: %v", err)
		}
		if st := s.Stats(); st.BadEntries != 1 || st.Promotions != 0 || st.RAMEntries != 0 || st.RAMBytes != 0 {
			t.Fatalf("stats %+v", st)
		}
		// A plain Read loop sees the error with the last bytes.
		dir, k, path = writeEntry(t, testFP)
		editFile(t, path, flip(off))
		s = openStore(t, withDir(dir))
		r, _ = s.Get(k)
		if _, err := io.ReadAll(r); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadAll: %v", err)
		}
		r.Close()
	}
}

// TestOtherFingerprint: a file written by a store of another checkpoint,
// placed under this store's name for the key, is removed.
func TestOtherFingerprint(t *testing.T) {
	_, k, otherPath := writeEntry(t, "another checkpoint")
	dir, k2, path := writeEntry(t, testFP)
	if k != k2 {
		t.Fatal("test keys differ")
	}
	if filepath.Dir(otherPath) == filepath.Dir(path) {
		t.Fatal("two fingerprints share a subdirectory")
	}
	b, err := os.ReadFile(otherPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, withDir(dir))
	if s.Has(k) || s.Stats().BadEntries != 1 {
		t.Fatalf("foreign entry: indexed %v, stats %+v", s.Has(k), s.Stats())
	}
}

// TestMisnamedEntry: a valid file under another key's name is removed.
func TestMisnamedEntry(t *testing.T) {
	dir, k, path := writeEntry(t, testFP)
	other := k
	other[0] ^= 1
	otherPath := filepath.Join(filepath.Dir(path), other.String()+entrySuffix)
	if err := os.Rename(path, otherPath); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, withDir(dir))
	if s.Has(k) || s.Has(other) || s.Stats().BadEntries != 1 {
		t.Fatalf("misnamed entry kept: %+v", s.Stats())
	}
	if _, err := os.Stat(otherPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("misnamed file not removed")
	}
}

// TestNewerFormatLeftAlone: a file of a newer format is not read, not
// counted and not removed (a newer build shares the directory).
func TestNewerFormatLeftAlone(t *testing.T) {
	dir, k, path := writeEntry(t, testFP)
	editFile(t, path, setVersion(FormatVersion+1))
	s := openStore(t, withDir(dir))
	if s.Has(k) {
		t.Fatal("newer entry indexed")
	}
	if _, err := s.Get(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("newer file removed: %v", err)
	}
	if st := s.Stats(); st.BadEntries != 0 || st.DiskBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// flipAlloc hands out heap buffers and remembers them, so a test can
// corrupt a RAM copy.
type flipAlloc struct{ bufs [][]byte }

func (a *flipAlloc) alloc(n int) (Buffer, error) {
	b := make([]byte, n)
	a.bufs = append(a.bufs, b)
	return &heapBuffer{b}, nil
}

// TestBadRAMCopy: a RAM copy damaged in memory is caught by its checksum
// and dropped; the disk copy still serves.
func TestBadRAMCopy(t *testing.T) {
	var a flipAlloc
	s := openStore(t, func(o *Options) { o.Alloc = a.alloc })
	k, m := testKey(s.Hasher(), 1, 5, 1000)
	putContent(t, s, k, m)
	s.Flush()
	a.bufs[0][500] ^= 1
	if _, r, err := readAll(s, k); !errors.Is(err, ErrCorrupt) || r.Tier() != TierRAM {
		t.Fatalf("damaged RAM copy: %v", err)
	}
	if st := s.Stats(); st.RAMEntries != 0 || st.RAMBytes != 0 || st.DiskEntries != 1 || st.BadEntries != 1 {
		t.Fatalf("stats %+v", st)
	}
	if tier := mustRead(t, s, k); tier != TierDisk {
		t.Fatalf("read from %v", tier)
	}
}

// TestAllocatorUsed: the RAM tier takes its memory from Options.Alloc and
// gives it back.
func TestAllocatorUsed(t *testing.T) {
	var live, total int
	alloc := func(n int) (Buffer, error) {
		live++
		total++
		return &countedBuffer{heapBuffer{make([]byte, n)}, &live}, nil
	}
	s := openStore(t, withDir(""), withRAM(2000), func(o *Options) { o.Alloc = alloc })
	for i := range 4 {
		k, m := testKey(s.Hasher(), i, 5, 1000)
		putContent(t, s, k, m)
	}
	if total != 4 || live != 2 {
		t.Fatalf("allocated %d, live %d; want 4 and 2", total, live)
	}
	s.Close()
	if live != 0 {
		t.Fatalf("%d buffers live after Close", live)
	}
}

type countedBuffer struct {
	heapBuffer
	live *int
}

func (c *countedBuffer) Free() error { *c.live--; return nil }

// TestCloseWithWorkInFlight: a Put that finishes after Close and a Reader
// open across Close neither leak nor lose their buffers.
func TestCloseWithWorkInFlight(t *testing.T) {
	var live int
	alloc := func(n int) (Buffer, error) {
		live++
		return &countedBuffer{heapBuffer{make([]byte, n)}, &live}, nil
	}
	s := openStore(t, func(o *Options) { o.Alloc = alloc })
	k, m := testKey(s.Hasher(), 1, 5, 1000)
	putContent(t, s, k, m)
	r, err := s.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	k2, m2 := testKey(s.Hasher(), 2, 5, 1000)
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		_, err := s.Put(k2, m2, func(w io.Writer) error {
			close(entered)
			<-release
			_, err := w.Write(content(k2, 1000))
			return err
		})
		done <- err
	}()
	<-entered
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Put finishing after Close: %v", err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, content(k, 1000)) {
		t.Fatalf("Reader across Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if live != 0 {
		t.Fatalf("%d buffers live", live)
	}
}
