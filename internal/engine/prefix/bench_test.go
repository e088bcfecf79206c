package prefix

import (
	"crypto/sha256"
	"io"
	"os"
	"testing"
)

// Benchmarks of what the engine pays per entry and per prompt. The disk
// benchmarks use $K3_PREFIX_BENCH_DIR if set (put it on the disk the cache
// will live on), else a temporary directory. After each write and read the
// store drops the file's pages from the page cache, so Get reads the
// device. Run with a small -benchtime, e.g.
//
//	go test ./internal/engine/prefix -run '^$' -bench . -benchtime 3x

const benchState = 256 << 20 // a KDA state snapshot, order of magnitude (434 MB at the released shape)

func benchDir(b *testing.B) string {
	if d := os.Getenv("K3_PREFIX_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "prefix-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// writeChunked streams src in 8 MiB writes, as an engine writes a state
// layer by layer from its own buffers.
func writeChunked(src []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		for off := 0; off < len(src); off += 8 << 20 {
			if _, err := w.Write(src[off:min(off+8<<20, len(src))]); err != nil {
				return err
			}
		}
		return nil
	}
}

func benchPut(b *testing.B, opts ...storeOpt) {
	s := openStore(b, opts...)
	src := content(Key{1}, benchState)
	b.SetBytes(benchState)
	i := 0
	for b.Loop() {
		k, m := testKey(s.Hasher(), i, 5, benchState)
		i++
		if ok, err := s.Put(k, m, writeChunked(src)); !ok || err != nil {
			b.Fatalf("Put: %v %v", ok, err)
		}
		s.Flush()
	}
}

func benchGet(b *testing.B, opts ...storeOpt) {
	s := openStore(b, opts...)
	k, m := testKey(s.Hasher(), 1, 5, benchState)
	if ok, err := s.Put(k, m, writeChunked(content(k, benchState))); !ok || err != nil {
		b.Fatalf("Put: %v %v", ok, err)
	}
	s.Flush()
	dst := make([]byte, benchState)
	b.SetBytes(benchState)
	for b.Loop() {
		r, err := s.Get(k)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < len(dst); off += 8 << 20 {
			if _, err := io.ReadFull(r, dst[off:min(off+8<<20, len(dst))]); err != nil {
				b.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiskPut: a 256 MiB state written to the disk tier (temp file,
// CRC-32C, fsync, rename, directory fsync); two fit, so from the third on
// each Put also evicts one file.
func BenchmarkDiskPut(b *testing.B) {
	benchPut(b, withRAM(0), withDir(benchDir(b)), withDisk(2*(benchState+headerRegion)))
}

// BenchmarkDiskGet: a 256 MiB state read back from the disk tier into the
// engine's buffer, checksum verified.
func BenchmarkDiskGet(b *testing.B) {
	benchGet(b, withRAM(0), withDir(benchDir(b)), withDisk(benchState+headerRegion))
}

// BenchmarkRAMPut: into the RAM tier (heap buffers), one copy plus the
// CRC-32C; two fit, so each Put evicts one.
func BenchmarkRAMPut(b *testing.B) {
	benchPut(b, withRAM(2*benchState), withDir(""))
}

// BenchmarkRAMGet: out of the RAM tier, one copy plus the CRC-32C.
func BenchmarkRAMGet(b *testing.B) {
	benchGet(b, withRAM(benchState), withDir(""))
}

func benchTokens(n int) []int {
	t := make([]int, n)
	for i := range t {
		t[i] = (i * 7919) % 160000
	}
	return t
}

// BenchmarkHash20k: the block chain of a 20,000-token prompt (B=512).
func BenchmarkHash20k(b *testing.B) {
	x := mustHasher(b, testFP, 512)
	tokens := benchTokens(20000)
	b.SetBytes(int64(len(tokens)) * 8)
	for b.Loop() {
		x.Prompt(tokens)
	}
}

// BenchmarkLookup20k: a lookup of a 20,000-token prompt (B=512) over an
// index that holds all its 39 blocks, a state every 4 blocks and one at
// the end, plus 32 other states at its last anchor (other conversations'
// turn ends), from a hashed prompt.
func BenchmarkLookup20k(b *testing.B) {
	x := mustHasher(b, testFP, 512)
	tokens := benchTokens(20000)
	p := x.Prompt(tokens)
	ix := newFakeIndex()
	ix.save(p, 4, false)
	for i := range 32 {
		other := x.Prompt(append(tokens[:p.Blocks()*512:p.Blocks()*512], benchTokens(i*10+5)...))
		ix.saveState(other, other.Len(), false)
	}
	for b.Loop() {
		if m := Lookup(ix, p, p.Len()); m.Pos != p.Len()/2048*2048 {
			b.Fatalf("lookup %d", m.Pos)
		}
	}
}

// BenchmarkWriteSyncBaseline: 256 MiB written in 8 MiB writes to a new
// file and fsync'd, without the store, the floor of BenchmarkDiskPut.
func BenchmarkWriteSyncBaseline(b *testing.B) {
	dir := benchDir(b)
	src := content(Key{1}, benchState)
	b.SetBytes(benchState)
	for b.Loop() {
		f, err := os.Create(dir + "/baseline")
		if err != nil {
			b.Fatal(err)
		}
		if err := writeChunked(src)(f); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		os.Remove(dir + "/baseline")
	}
}

// BenchmarkCopyCRCBaseline: a copy of 256 MiB plus its CRC-32C, the
// floor of a RAM-tier Get, measured in the same process.
func BenchmarkCopyCRCBaseline(b *testing.B) {
	src, dst := content(Key{1}, benchState), make([]byte, benchState)
	b.SetBytes(benchState)
	for b.Loop() {
		for off := 0; off < len(dst); off += 8 << 20 {
			copy(dst[off:off+8<<20], src[off:])
			crc32Update(0, dst[off:off+8<<20])
		}
	}
}

// BenchmarkSHA256Baseline: SHA-256 over the same 160,000 bytes in one
// call, the floor for BenchmarkHash20k measured in the same process.
func BenchmarkSHA256Baseline(b *testing.B) {
	buf := make([]byte, 20000*8)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		sha256.Sum256(buf)
	}
}
