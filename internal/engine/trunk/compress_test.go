package trunk

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/k3go/k3/internal/platform/kernel/bf16merge"
	"github.com/k3go/k3/internal/platform/kernel/expunpack"
)

// normalBF16 fills a buffer with BF16 values drawn like trained weights:
// normal, σ = scale.
func normalBF16(n int, scale float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 2*n)
	for i := range n {
		f := float32(r.NormFloat64() * scale)
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(f)>>16))
	}
	return b
}

func TestBlockRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	uniform := make([]byte, compBlockBytes)
	for i := range uniform {
		uniform[i] = byte(r.Uint32())
	}
	rle := bytes.Repeat([]byte{0x80, 0x3f}, compBlockBytes/2) // 1.0 everywhere: one exponent
	cases := map[string][]byte{
		"normal":       normalBF16(compBlockBytes/2, 0.02, 1),
		"normal-short": normalBF16(777, 0.5, 2),
		"uniform":      uniform,
		"one-exponent": rle,
		"zeros":        make([]byte, 4096),
		"two-bytes":    {0x12, 0x34},
	}
	var enc blockEncoder
	var dec blockDecoder
	for name, raw := range cases {
		src := enc.encodeBlock(nil, raw)
		got := make([]byte, len(raw))
		crc, err := dec.decodeBlock(got, src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, raw) {
			t.Fatalf("%s: decoded block differs", name)
		}
		if want := crc32.Checksum(raw, crcTable); crc != want {
			t.Fatalf("%s: decode's CRC %#x, want %#x", name, crc, want)
		}
		t.Logf("%s: %d -> %d bytes (mode %d)", name, len(raw), len(src), src[0])
		// Every truncation is refused, never a panic.
		for _, cut := range []int{0, 1, compHeader, len(src) / 2, len(src) - 1} {
			if _, err := dec.decodeBlock(got, src[:cut]); cut < len(src) && err == nil {
				t.Errorf("%s: block truncated to %d bytes decoded", name, cut)
			}
		}
	}
	// Normal weights compress: the exponent stream shrinks to under half.
	n := normalBF16(compBlockBytes/2, 0.02, 3)
	if s := len(enc.encodeBlock(nil, n)); float64(s) > 0.8*float64(len(n)) {
		t.Errorf("normal BF16 block compressed to %d of %d bytes", s, len(n))
	}
}

func TestCompressImageChecksums(t *testing.T) {
	img := normalBF16(3*compBlockBytes/2+100, 0.02, 4)
	var enc blockEncoder
	stored, cp := compressImage(&enc, nil, img)
	if cp.blocks() != 4 || cp.offs[len(cp.offs)-1] != int64(len(stored)) {
		t.Fatalf("%d blocks ending at %d of %d", cp.blocks(), cp.offs[len(cp.offs)-1], len(stored))
	}
	ds := newDecoders(3)
	defer ds.close()
	var run decodeRun
	out := roomFor(img, cp)
	if b := ds.decode(&run, out, int64(len(img)), stored, cp); b >= 0 || !bytes.Equal(out[:len(img)], img) {
		t.Fatalf("decode: failed block %d, equal %v", b, bytes.Equal(out[:len(img)], img))
	}
	// A flipped bit anywhere in block 2 is caught.
	for _, at := range []int64{cp.offs[2] + 2, cp.offs[2] + 10, cp.offs[3] - 1} {
		bad := bytes.Clone(stored)
		bad[at] ^= 4
		if b := ds.decode(&run, out, int64(len(img)), bad, cp); b != 2 {
			t.Errorf("bit flipped at %d: failed block %d, want 2", at, b)
		}
	}
}

func FuzzDecodeBlock(f *testing.F) {
	var enc blockEncoder
	f.Add(enc.encodeBlock(nil, normalBF16(500, 0.02, 5)), 1000)
	f.Add(enc.encodeBlock(nil, make([]byte, 64)), 64)
	f.Add(encodeFixedBlock(normalBF16(333, 0.02, 5)), 666)
	f.Add(encodeFixedBlock(normalBF16(64, 1e-30, 5)), 128) // escapes everywhere
	huff := blockEncoder{huffOnly: true}
	f.Add(huff.encodeBlock(nil, normalBF16(500, 0.02, 5)), 1000)
	f.Fuzz(func(t *testing.T, src []byte, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		var d blockDecoder
		d.decodeBlock(make([]byte, n&^1), src) // must not panic
	})
}

// eachMergeKernel runs a sub-benchmark per bf16merge implementation, so
// that the generic merge is the baseline of the same process.
func eachMergeKernel(b *testing.B, f func(b *testing.B)) {
	for _, k := range bf16merge.Implementations() {
		b.Run("merge="+k, func(b *testing.B) {
			restore, err := bf16merge.SetImplementation(k)
			if err != nil {
				b.Fatal(err)
			}
			defer restore()
			f(b)
		})
	}
}

// eachCode runs a sub-benchmark per exponent code: huff0 only (packs
// before the fixed-width mode) and the encoder's default choice, the
// latter once per fixed-code unpacker (generic: the table decoder in Go).
func eachCode(b *testing.B, f func(b *testing.B, enc *blockEncoder)) {
	b.Run("code=huff0", func(b *testing.B) { f(b, &blockEncoder{huffOnly: true}) })
	for _, u := range expunpack.Implementations() {
		b.Run("code=fixed/unpack="+u, func(b *testing.B) {
			restore, err := expunpack.SetImplementation(u)
			if err != nil {
				b.Fatal(err)
			}
			defer restore()
			f(b, &blockEncoder{})
		})
	}
}

// BenchmarkDecodeBlock decodes one 256 KiB block on one core, in cache,
// its CRC-32C included.
func BenchmarkDecodeBlock(b *testing.B) {
	eachCode(b, benchDecodeBlock)
}

func benchDecodeBlock(b *testing.B, enc *blockEncoder) {
	raw := normalBF16(compBlockBytes/2, 0.02, 6)
	src := enc.encodeBlock(nil, raw)
	var d blockDecoder
	out := make([]byte, len(raw))
	eachMergeKernel(b, func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportMetric(float64(len(src))/float64(len(raw)), "ratio")
		for b.Loop() {
			if _, err := d.decodeBlock(out, src); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodePart decodes a 64 MiB part (out of cache, as the ring
// does) with 1 and with GOMAXPROCS workers; the copy that stands in for
// the read is included.
func BenchmarkDecodePart(b *testing.B) {
	raw := normalBF16(32<<20, 0.02, 8)
	eachCode(b, func(b *testing.B, enc *blockEncoder) { benchDecodePart(b, enc, raw) })
}

func benchDecodePart(b *testing.B, enc *blockEncoder, raw []byte) {
	stored, cp := compressImage(enc, nil, raw)
	out := roomFor(raw, cp)
	eachMergeKernel(b, func(b *testing.B) {
		for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
				ds := newDecoders(w)
				defer ds.close()
				var run decodeRun
				b.SetBytes(int64(len(raw)))
				b.ReportMetric(float64(len(stored))/float64(len(raw)), "ratio")
				for b.Loop() {
					if ds.decode(&run, out, int64(len(raw)), stored, cp) >= 0 {
						b.Fatal("decode failed")
					}
				}
			})
		}
	})
}

// BenchmarkMergeWords merges one block's words and checksums them.
func BenchmarkMergeWords(b *testing.B) {
	exp, sm := make([]byte, 1<<17), make([]byte, 1<<17)
	dst := make([]byte, 1<<18)
	b.SetBytes(1 << 18)
	for b.Loop() {
		mergeWords(dst, exp, sm)
	}
}

// roomFor returns a buffer to decode img's compressed form in place,
// filled with a sentinel so that bytes the decode fails to write show.
func roomFor(img []byte, cp *compPart) []byte {
	room, _ := compRoom(int64(len(img)), cp, Extent{Off: 0, Size: cp.stored})
	return bytes.Repeat([]byte{0xA5}, int(room))
}

// TestDecodeInPlace decodes parts whose stored bytes span several read
// pieces, arriving out of order, into the head of the buffer that holds
// them: normal weights, a part whose second half does not compress (the
// image runs furthest ahead of the stored bytes in the middle, not at the
// end), one that compresses to almost nothing, and odd lengths. A corrupt
// block late in the part is still found, and a buffer without room is
// refused.
func TestDecodeInPlace(t *testing.T) {
	big := normalBF16(50*compBlockBytes+300, 0.02, 9) // about 9 MB stored: two pieces
	half := normalBF16(12*compBlockBytes, 0.02, 10)
	rng := rand.New(rand.NewPCG(1, 2))
	tail := make([]byte, 12*compBlockBytes+6)
	for i := range tail {
		tail[i] = byte(rng.Uint32())
	}
	mixed := append(half, tail...)
	flat := bytes.Repeat([]byte{0x3c, 0x80}, 7*compBlockBytes+18)
	for _, c := range []struct {
		name string
		img  []byte
	}{{"normal", big}, {"incompressible second half", mixed}, {"flat", flat}, {"one short block", normalBF16(1000, 0.02, 11)}} {
		var enc blockEncoder
		stored, cp := compressImage(&enc, nil, c.img)
		for i, workers := range []int{1, 2, 5} {
			// The part starts at an unaligned file offset in the
			// second and third runs, so the read window has padding.
			off := int64([]int{0, 1234, 4097}[i])
			file := append(make([]byte, off), stored...)
			ext := Extent{Off: off, Size: cp.stored}
			room, at := compRoom(int64(len(c.img)), cp, ext)
			t.Logf("%s at %d: %d bytes stored as %d in %d blocks; room %d, stored bytes at %d", c.name, off, len(c.img), len(stored), cp.blocks(), room, at)
			ds := newDecoders(workers)
			var run decodeRun
			// Reads complete out of order: later pieces often first.
			read := func(_ context.Context, e Extent, buf []byte) error {
				time.Sleep(time.Duration(2-(e.Off/pieceBytes)%3) * time.Millisecond)
				copy(buf[e.BufOff:e.BufOff+e.Size], file[e.Off:e.Off+e.Size])
				return nil
			}
			out := bytes.Repeat([]byte{0xA5}, int(room))
			b, err := ds.run(context.Background(), &run, read, out, int64(len(c.img)), cp, ext, nil)
			if err != nil || b >= 0 || !bytes.Equal(out[:len(c.img)], c.img) {
				t.Fatalf("%s, %d workers: failed block %d, error %v, equal %v", c.name, workers, b, err, bytes.Equal(out[:len(c.img)], c.img))
			}
			last := cp.blocks() - 1
			bad := bytes.Clone(stored)
			bad[cp.offs[last]+(cp.offs[last+1]-cp.offs[last])/2] ^= 0x10
			if b := ds.decode(&run, roomFor(c.img, cp), int64(len(c.img)), bad, cp); b != last {
				t.Errorf("%s, %d workers: corrupt block %d reported as %d", c.name, workers, last, b)
			}
			if _, err := ds.run(context.Background(), &run, read, out[:room-1], int64(len(c.img)), cp, ext, nil); err == nil {
				t.Errorf("%s: a buffer of %d bytes, one short of the room, was accepted", c.name, room-1)
			}
			ds.close()
		}
	}
}
