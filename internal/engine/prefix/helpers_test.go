package prefix

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
)

const testFP = "test-fingerprint"

// testB is the block size of the store tests.
const testB = 8

// content returns the deterministic payload of key: every writer of a key
// writes these bytes, so a reader can check anything it reads.
func content(k Key, n int64) []byte {
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(k[:]), binary.LittleEndian.Uint64(k[8:])))
	b := make([]byte, n+8)
	for i := int64(0); i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

// testKey returns a state entry's key and meta for the i-th test prompt:
// prompt i is [i, i, …] of length pos, so keys of different i differ.
func testKey(x *Hasher, i, pos int, size int64) (Key, Meta) {
	tokens := make([]int, pos)
	for j := range tokens {
		tokens[j] = i
	}
	k, m := x.Prompt(tokens).StateMeta(pos)
	m.Size, m.Saves = size, 1000
	return k, m
}

type storeOpt func(*Options)

func withRAM(n int64) storeOpt  { return func(o *Options) { o.RAMBytes = n } }
func withDisk(n int64) storeOpt { return func(o *Options) { o.DiskBytes = n } }
func withDir(d string) storeOpt { return func(o *Options) { o.Dir = d } }
func withFP(fp string) storeOpt { return func(o *Options) { o.Fingerprint = fp } }
func withLog(l *slog.Logger) storeOpt {
	return func(o *Options) { o.Logger = l }
}

// openStore opens a store with a 1 MiB RAM tier and a 64 MiB disk tier in
// a new temporary directory unless told otherwise; it is closed at the
// end of the test.
func openStore(t testing.TB, opts ...storeOpt) *Store {
	t.Helper()
	o := Options{Fingerprint: testFP, BlockSize: testB, RAMBytes: 1 << 20, Dir: t.TempDir(), DiskBytes: 64 << 20}
	for _, f := range opts {
		f(&o)
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// putContent stores content(k) and reports whether it was stored.
func putContent(t testing.TB, s *Store, k Key, m Meta) bool {
	t.Helper()
	data := content(k, m.Size)
	ok, err := s.Put(k, m, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		t.Fatalf("Put %s: %v", k, err)
	}
	return ok
}

// readAll reads an entry the way the engine does (sections by
// io.ReadFull, then Close), returning the payload and Close's verdict.
func readAll(s *Store, k Key) ([]byte, *Reader, error) {
	r, err := s.Get(k)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, r.Meta().Size)
	_, rerr := io.ReadFull(r, buf)
	cerr := r.Close()
	if rerr != nil && cerr == nil {
		return nil, r, errors.New("ReadFull failed but Close reported success")
	}
	return buf, r, cerr
}

// mustRead reads k and checks it is content(k) and verified.
func mustRead(t testing.TB, s *Store, k Key) Tier {
	t.Helper()
	got, r, err := readAll(s, k)
	if err != nil {
		t.Fatalf("reading %s: %v", k, err)
	}
	if !bytes.Equal(got, content(k, r.Meta().Size)) {
		t.Fatalf("reading %s: payload differs", k)
	}
	return r.Tier()
}

// entryFiles lists the entry files of the store's directory.
func entryFiles(t testing.TB, s *Store) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(s.Dir(), "*"+entrySuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// logCounter is a slog.Handler that counts records per level.
type logCounter struct {
	mu     sync.Mutex
	counts map[slog.Level]int
	msgs   []string
}

func newLogCounter() *logCounter { return &logCounter{counts: map[slog.Level]int{}} }

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r.Level]++
	c.msgs = append(c.msgs, r.Message)
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }
func (c *logCounter) count(l slog.Level) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[l]
}

const slogWarn = slog.LevelWarn

func slogLogger(h slog.Handler) *slog.Logger { return slog.New(h) }
