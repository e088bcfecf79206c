package prefix

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
)

func TestRAMRoundTrip(t *testing.T) {
	s := openStore(t, withDir(""))
	x := s.Hasher()
	k, m := testKey(x, 1, 20, 1000)
	m.HasLogits, m.Sections = true, []int64{600, 300, 100}
	if !putContent(t, s, k, m) {
		t.Fatal("not stored")
	}
	got, ok := s.Stat(k)
	if !ok || got.Pos != 20 || got.Tail != 4 || !got.HasLogits || !slices.Equal(got.Sections, m.Sections) {
		t.Fatalf("Stat = %+v, %v", got, ok)
	}
	if tier := mustRead(t, s, k); tier != TierRAM {
		t.Fatalf("read from %v", tier)
	}
	// A second Put of the key does not call write.
	ok, err := s.Put(k, m, func(io.Writer) error { t.Fatal("write called for a present key"); return nil })
	if ok || err != nil {
		t.Fatalf("second Put = %v, %v", ok, err)
	}
	st := s.Stats()
	if st.RAMHits != 1 || st.RAMEntries != 1 || st.RAMBytes != 1000 || st.DiskEnabled || st.DiskEntries != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := s.Get(Key{1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing key: %v", err)
	}
}

func TestDiskRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, withRAM(0), withDir(dir))
	k, m := testKey(s.Hasher(), 1, 13, 5000)
	m.Sections = []int64{5000}
	if !putContent(t, s, k, m) {
		t.Fatal("not stored")
	}
	if files := entryFiles(t, s); len(files) != 1 || filepath.Base(files[0]) != k.String()+entrySuffix {
		t.Fatalf("files %v", files)
	}
	if tier := mustRead(t, s, k); tier != TierDisk {
		t.Fatalf("read from %v", tier)
	}
	st := s.Stats()
	if st.DiskHits != 1 || st.DiskEntries != 1 || st.DiskBytes != headerRegion+5000 || st.BytesWritten != headerRegion+5000 || st.BytesRead != 5000 {
		t.Fatalf("stats %+v", st)
	}
	s.Close()
	if _, err := s.Get(k); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}

	// Another store on the directory indexes it at Open.
	s2 := openStore(t, withRAM(0), withDir(dir))
	got, ok := s2.Stat(k)
	if !ok || got.Pos != 13 || got.Tail != 5 || got.Size != 5000 || !slices.Equal(got.Sections, m.Sections) {
		t.Fatalf("reopened Stat = %+v, %v", got, ok)
	}
	mustRead(t, s2, k)
}

func TestWriteBehindAndPromotion(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, withDir(dir))
	k, m := testKey(s.Hasher(), 1, 30, 4000)
	putContent(t, s, k, m)
	s.Flush()
	if len(entryFiles(t, s)) != 1 {
		t.Fatal("write-behind wrote no file")
	}
	st := s.Stats()
	if st.RAMEntries != 1 || st.DiskEntries != 1 || st.PendingWrites != 0 {
		t.Fatalf("after Flush: %+v", st)
	}
	s.Close()

	s2 := openStore(t, withDir(dir))
	if tier := mustRead(t, s2, k); tier != TierDisk {
		t.Fatalf("first read after reopening from %v", tier)
	}
	if tier := mustRead(t, s2, k); tier != TierRAM {
		t.Fatalf("second read from %v, want the promoted copy", tier)
	}
	if st := s2.Stats(); st.Promotions != 1 || st.RAMBytes != 4000 {
		t.Fatalf("stats %+v", st)
	}
	// A promotion abandoned halfway gives its reservation back.
	k2, m2 := testKey(s2.Hasher(), 2, 30, 4000)
	putContent(t, s2, k2, m2)
	s2.Flush()
	s2.Close()
	s3 := openStore(t, withDir(dir))
	r, err := s3.Get(k2)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r, make([]byte, 100))
	if err := r.Close(); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Close after a partial read: %v", err)
	}
	if st := s3.Stats(); st.RAMBytes != 0 || st.RAMEntries != 0 || st.Promotions != 0 {
		t.Fatalf("after an abandoned promotion: %+v", st)
	}
}

// TestLookupThroughStore saves as an engine would (blocks, sparse states,
// end state) and finds the points through a second store on the
// directory.
func TestLookupThroughStore(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, withDir(dir))
	x := s.Hasher()
	tokens := make([]int, 5*testB+3)
	for i := range tokens {
		tokens[i] = i * 7
	}
	p := s.Prompt(tokens)
	for i := range p.Blocks() {
		k, m := p.BlockMeta(i)
		m.Size, m.Saves = 100, 10
		putContent(t, s, k, m)
	}
	for _, pos := range []int{2 * testB, 4 * testB, len(tokens)} {
		k, m := p.StateMeta(pos)
		m.Size, m.Saves, m.HasLogits = 300, 10, pos == len(tokens)
		putContent(t, s, k, m)
	}
	if m := s.Lookup(p, p.Len()); m.Pos != len(tokens) || !m.HasLogits {
		t.Fatalf("same store: %+v", m)
	}
	s.Flush()

	s2 := openStore(t, withDir(dir))
	changed := slices.Clone(tokens)
	changed[4*testB-1]++
	m := s2.Lookup(x.Prompt(changed), len(changed))
	if m.Pos != 2*testB || m.Anchor != 2 {
		t.Fatalf("changed at %d: %+v", 4*testB-1, m)
	}
	for i := range m.Anchor {
		mustRead(t, s2, p.BlockKey(i))
	}
	mustRead(t, s2, m.State)
	if st := s2.Stats(); st.Lookups != 1 || st.LookupHits != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A prompt of another hasher finds nothing.
	other := mustHasher(t, "other", testB)
	if m := s2.Lookup(other.Prompt(tokens), len(tokens)); m.Hit() {
		t.Fatalf("foreign hasher hit %+v", m)
	}
}

func TestPutErrors(t *testing.T) {
	for _, tier := range []string{"ram", "disk"} {
		t.Run(tier, func(t *testing.T) {
			s := openStore(t)
			if tier == "disk" {
				s = openStore(t, withRAM(0))
			}
			k, m := testKey(s.Hasher(), 1, 9, 100)
			boom := errors.New("boom")
			if ok, err := s.Put(k, m, func(w io.Writer) error { w.Write(make([]byte, 10)); return boom }); ok || !errors.Is(err, boom) {
				t.Fatalf("failing write: %v, %v", ok, err)
			}
			if ok, err := s.Put(k, m, func(w io.Writer) error { _, err := w.Write(make([]byte, 99)); return err }); ok || err == nil {
				t.Fatalf("short write: %v, %v", ok, err)
			}
			if ok, err := s.Put(k, m, func(w io.Writer) error { _, err := w.Write(make([]byte, 101)); return err }); ok || err == nil {
				t.Fatalf("long write: %v, %v", ok, err)
			}
			if s.Has(k) || len(entryFiles(t, s)) != 0 || len(tempFiles(t, s.Dir())) != 0 {
				t.Fatal("a failed Put left something behind")
			}
			// The caller's errors are not the disk's: even a permission
			// error from write leaves the disk tier on and counts nothing.
			if _, err := s.Put(k, m, func(io.Writer) error { return fs.ErrPermission }); !errors.Is(err, fs.ErrPermission) {
				t.Fatalf("permission error from write: %v", err)
			}
			if st := s.Stats(); st.RAMBytes != 0 || st.DiskBytes != 0 || st.WriteErrors != 0 || !st.DiskEnabled {
				t.Fatalf("after the caller's errors: %+v", st)
			}
			bad := m
			bad.Tail = 3
			if _, err := s.Put(k, bad, nil); !errors.Is(err, ErrBadMeta) {
				t.Fatalf("bad meta: %v", err)
			}
			// It still works.
			if !putContent(t, s, k, m) {
				t.Fatal("not stored after failures")
			}
			mustRead(t, s, k)
		})
	}
}

func TestMetaCheck(t *testing.T) {
	good := []Meta{
		{Kind: KindBlock, Pos: 8},
		{Kind: KindBlock, Pos: 16, Size: 10, Sections: []int64{4, 6}},
		{Kind: KindState, Pos: 1, Tail: 1, HasLogits: true},
		{Kind: KindState, Pos: 8, Tail: 0},
		{Kind: KindState, Pos: 15, Tail: 7},
	}
	bad := []Meta{
		{Kind: 0, Pos: 8},
		{Kind: 3, Pos: 8},
		{Kind: KindBlock, Pos: 0},
		{Kind: KindBlock, Pos: 7},
		{Kind: KindBlock, Pos: 8, HasLogits: true},
		{Kind: KindBlock, Pos: 8, Tail: 1},
		{Kind: KindState, Pos: 9, Tail: 2},
		{Kind: KindState, Pos: 9, Tail: 9},
		{Kind: KindState, Pos: 3, Tail: 3, Size: -1},
		{Kind: KindState, Pos: 3, Tail: 3, Saves: -1},
		{Kind: KindState, Pos: 3, Tail: 3, Size: 10, Sections: []int64{4, 5}},
		{Kind: KindState, Pos: 3, Tail: 3, Size: 10, Sections: []int64{11, -1}},
		{Kind: KindState, Pos: 3, Tail: 3, Size: MaxPayload + 1},
		{Kind: KindState, Pos: 3, Tail: 3, Sections: make([]int64, MaxSections+1)},
	}
	for _, m := range good {
		if err := m.check(8); err != nil {
			t.Errorf("%+v: %v", m, err)
		}
	}
	for _, m := range bad {
		if err := m.check(8); err == nil {
			t.Errorf("%+v accepted", m)
		}
	}
}

// TestRAMEvictionGDS: with equal sizes GreedyDual-Size evicts the lowest
// value per byte first; the clock L lets a new entry of low value outrank
// old entries of higher value that are not used; a hit renews an entry.
func TestRAMEvictionGDS(t *testing.T) {
	s := openStore(t, withRAM(3000), withDir(""))
	x := s.Hasher()
	keys := map[string]Key{}
	put := func(name string, i int, perByte int64) {
		t.Helper()
		k, m := testKey(x, i, 5, 1000)
		m.Saves = perByte * 1000
		keys[name] = k
		if !putContent(t, s, k, m) {
			t.Fatalf("%s not stored", name)
		}
	}
	has := func(names ...string) {
		t.Helper()
		var got []string
		for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
			if k, ok := keys[n]; ok && s.Has(k) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, names) {
			t.Fatalf("present %v, want %v", got, names)
		}
	}
	put("a", 1, 30)
	put("b", 2, 40)
	put("c", 3, 50)
	put("d", 4, 25) // evicts a (30): L = 30, d = 55
	has("b", "c", "d")
	put("e", 5, 25) // evicts b (40), older and worth more than d: L = 40, e = 65
	has("c", "d", "e")
	mustRead(t, s, keys["c"]) // c = 40 + 50 = 90
	put("f", 6, 25)           // evicts d (55); without the hit it would have been c (50)
	has("c", "e", "f")
	if st := s.Stats(); st.RAMEvictions != 3 || st.RAMEntries != 3 || st.RAMBytes != 3000 {
		t.Fatalf("stats %+v", st)
	}
	// An entry larger than the tier is refused (no disk tier).
	k, m := testKey(x, 9, 5, 3001)
	if putContent(t, s, k, m) {
		t.Fatal("oversized entry stored")
	}
}

// TestDiskBoundEvictsAndGoesOn: a disk tier of three entries takes ten
// Puts, keeps the most valuable and stays within its bound.
func TestDiskBoundEvictsAndGoesOn(t *testing.T) {
	const size = 1000
	s := openStore(t, withRAM(0), withDisk(3*(headerRegion+size)))
	x := s.Hasher()
	var keys []Key
	for i := range 10 {
		k, m := testKey(x, i, 5, size)
		m.Saves = int64(1000 * (i + 1))
		if i == 4 {
			m.Saves = 1 << 40 // worth keeping whatever comes later
		}
		keys = append(keys, k)
		if !putContent(t, s, k, m) {
			t.Fatalf("Put %d not stored", i)
		}
		if st := s.Stats(); st.DiskBytes > st.DiskCapacity {
			t.Fatalf("over the bound: %+v", st)
		}
	}
	if n := len(entryFiles(t, s)); n != 3 {
		t.Fatalf("%d files, want 3", n)
	}
	for _, i := range []int{4, 8, 9} {
		mustRead(t, s, keys[i])
	}
	if st := s.Stats(); st.DiskEvictions != 7 || st.DiskEntries != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Larger than the whole tier: not stored, not an error.
	k, m := testKey(x, 99, 5, 3*(headerRegion+size))
	if putContent(t, s, k, m) {
		t.Fatal("oversized entry stored")
	}
}

// TestDiskFull: a write that hits ENOSPC fails, evicts, and the next
// writes succeed; the write-behind retries once.
func TestDiskFull(t *testing.T) {
	s := openStore(t, withRAM(0))
	x := s.Hasher()
	var keys []Key
	for i := range 3 {
		k, m := testKey(x, i, 5, 2000)
		keys = append(keys, k)
		putContent(t, s, k, m)
	}
	fail := 1
	s.testHook = func(stage string, n int64) error {
		if stage == "payload" && fail > 0 {
			fail--
			return &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
		}
		return nil
	}
	k, m := testKey(x, 3, 5, 2000)
	if ok, err := s.Put(k, m, func(w io.Writer) error { _, err := w.Write(content(k, 2000)); return err }); ok || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on a full disk: %v, %v", ok, err)
	}
	st := s.Stats()
	if st.WriteErrors != 1 || st.DiskEvictions != 1 || !st.DiskEnabled || len(tempFiles(t, s.Dir())) != 0 {
		t.Fatalf("after ENOSPC: %+v", st)
	}
	if !putContent(t, s, k, m) {
		t.Fatal("Put after ENOSPC not stored")
	}
	mustRead(t, s, k)
	// The entry evicted for room was the least valuable (all equal: the
	// oldest).
	if s.Has(keys[0]) || !s.Has(keys[1]) || !s.Has(keys[2]) {
		t.Fatal("ENOSPC evicted the wrong entry")
	}

	// The write-behind: the first attempt fails, the retry succeeds.
	s2 := openStore(t)
	fail = 1
	s2.testHook = s.testHook
	k2, m2 := testKey(s2.Hasher(), 1, 5, 2000)
	putContent(t, s2, k2, m2)
	s2.Flush()
	if st := s2.Stats(); st.WriteErrors != 1 || st.DiskEntries != 1 {
		t.Fatalf("write-behind after ENOSPC: %+v", st)
	}
}

func TestNotWritableDir(t *testing.T) {
	// A path under a regular file cannot be a directory, whoever we are.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	logs := newLogCounter()
	s := openStore(t, withDir(filepath.Join(file, "cache")), withRAM(3000), withLog(slogLogger(logs)))
	if n := logs.count(slogWarn); n != 1 {
		t.Fatalf("%d warnings, want 1 (%v)", n, logs.msgs)
	}
	if st := s.Stats(); st.DiskEnabled || s.Dir() != "" {
		t.Fatalf("disk tier on: %+v", st)
	}
	k, m := testKey(s.Hasher(), 1, 5, 2000)
	if !putContent(t, s, k, m) {
		t.Fatal("RAM-only Put not stored")
	}
	mustRead(t, s, k)
	k, m = testKey(s.Hasher(), 2, 5, 4000)
	if putContent(t, s, k, m) {
		t.Fatal("entry larger than RAM stored without a disk")
	}
	if n := logs.count(slogWarn); n != 1 {
		t.Fatalf("%d warnings after Puts, want 1", n)
	}
}

// TestDirBecomesReadOnly: permissions removed while running turn the disk
// tier off with one warning; the store goes on in RAM.
func TestDirBecomesReadOnly(t *testing.T) {
	logs := newLogCounter()
	s := openStore(t, withLog(slogLogger(logs)))
	if err := os.Chmod(s.Dir(), 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(s.Dir(), 0o755)
	if f, err := os.Create(filepath.Join(s.Dir(), "probe")); err == nil {
		f.Close()
		t.Skip("permission bits do not stop this process (root); TestReadOnlyFileSystem covers the path")
	}
	checkDiskTurnsOff(t, s, logs)
}

// TestReadOnlyFileSystem: the same with EROFS injected into the writes
// (runs as root too).
func TestReadOnlyFileSystem(t *testing.T) {
	logs := newLogCounter()
	s := openStore(t, withLog(slogLogger(logs)))
	s.testHook = func(stage string, n int64) error {
		return &os.PathError{Op: "write", Path: s.Dir(), Err: syscall.EROFS}
	}
	checkDiskTurnsOff(t, s, logs)
	if files := tempFiles(t, s.Dir()); len(files) != 0 {
		t.Fatalf("temporary files left: %v", files)
	}
}

func checkDiskTurnsOff(t *testing.T, s *Store, logs *logCounter) {
	t.Helper()
	x := s.Hasher()
	for i := range 3 {
		k, m := testKey(x, i, 5, 1000)
		if !putContent(t, s, k, m) {
			t.Fatalf("Put %d not stored", i)
		}
	}
	s.Flush()
	if st := s.Stats(); st.DiskEnabled || st.RAMEntries != 3 {
		t.Fatalf("stats %+v", st)
	}
	if n := logs.count(slogWarn); n != 1 {
		t.Fatalf("%d warnings, want 1 (%v)", n, logs.msgs)
	}
	// RAM entries are evictable now that they cannot reach the disk.
	k, m := testKey(x, 9, 5, 1<<20)
	if !putContent(t, s, k, m) {
		t.Fatal("large Put not stored")
	}
}

// TestConcurrentPutsOneKey: while one Put of a key writes, the others
// return at once without writing; the key is written once.
func TestConcurrentPutsOneKey(t *testing.T) {
	for _, tier := range []string{"ram", "disk"} {
		t.Run(tier, func(t *testing.T) {
			s := openStore(t)
			if tier == "disk" {
				s = openStore(t, withRAM(0))
			}
			k, m := testKey(s.Hasher(), 1, 5, 1000)
			entered, release := make(chan struct{}), make(chan struct{})
			var calls sync.Map
			first := make(chan bool)
			go func() {
				ok, _ := s.Put(k, m, func(w io.Writer) error {
					calls.Store("first", true)
					close(entered)
					<-release
					_, err := w.Write(content(k, 1000))
					return err
				})
				first <- ok
			}()
			<-entered
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					ok, err := s.Put(k, m, func(io.Writer) error { calls.Store(i, true); return nil })
					if ok || err != nil {
						t.Errorf("concurrent Put = %v, %v", ok, err)
					}
				})
			}
			wg.Wait()
			close(release)
			if !<-first {
				t.Fatal("first Put not stored")
			}
			n := 0
			calls.Range(func(any, any) bool { n++; return true })
			if n != 1 {
				t.Fatalf("write called %d times", n)
			}
			s.Flush()
			mustRead(t, s, k)
			if files := entryFiles(t, s); len(files) != 1 {
				t.Fatalf("files %v", files)
			}
		})
	}
}

// TestReaderContract: errors after Close, reads of zero length, an empty
// payload.
func TestReaderContract(t *testing.T) {
	s := openStore(t)
	k, m := testKey(s.Hasher(), 1, 5, 0)
	putContent(t, s, k, m)
	r, err := s.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(nil); n != 0 || err != io.EOF {
		t.Fatalf("empty payload Read = %d, %v", n, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Fatal("Read after Close succeeded")
	}
	k, m = testKey(s.Hasher(), 2, 5, 100)
	putContent(t, s, k, m)
	r, _ = s.Get(k)
	if n, err := r.Read(nil); n != 0 || err != nil {
		t.Fatalf("zero-length Read = %d, %v", n, err)
	}
	got, err := io.ReadAll(r) // plain loop: io.EOF after the verified end
	if err != nil || !bytes.Equal(got, content(k, 100)) {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRemove(t *testing.T) {
	s := openStore(t)
	x := s.Hasher()
	k1, m1 := testKey(x, 1, 5, 1000) // RAM and disk
	putContent(t, s, k1, m1)
	s.Flush()
	k2, m2 := testKey(x, 2, 5, 2<<20) // larger than RAM: disk only
	putContent(t, s, k2, m2)

	// k4 waits in the write-behind queue behind k3, whose write is held.
	entered, release := make(chan struct{}), make(chan struct{})
	s.testHook = func(stage string, n int64) error {
		if stage == "payload" && entered != nil {
			close(entered)
			entered = nil
			<-release
		}
		return nil
	}
	wait := entered
	k3, m3 := testKey(x, 3, 5, 1000)
	putContent(t, s, k3, m3)
	<-wait
	k4, m4 := testKey(x, 4, 5, 1000)
	putContent(t, s, k4, m4)
	if st := s.Stats(); st.PendingWrites != 2 {
		t.Fatalf("pending %d, want 2", st.PendingWrites)
	}
	for _, k := range []Key{k1, k2, k4} {
		if !s.Remove(k) {
			t.Fatal("Remove of a present key reported false")
		}
		if s.Has(k) {
			t.Fatal("still indexed")
		}
		if _, err := s.Get(k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Remove: %v", err)
		}
	}
	close(release)
	s.Flush()
	if s.Remove(k1) {
		t.Fatal("Remove of an absent key reported true")
	}
	if st := s.Stats(); st.RAMEntries != 1 || st.DiskEntries != 1 || st.RAMBytes != 1000 || len(entryFiles(t, s)) != 1 {
		t.Fatalf("after Remove: %+v", st)
	}
	mustRead(t, s, k3)
	// All four share the seed as their anchor; only k3 is left there.
	if refs := s.States(x.Seed()); len(refs) != 1 || refs[0].Key != k3 {
		t.Fatalf("anchor index %v, want only k3", refs)
	}
}
