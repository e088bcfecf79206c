package trunk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// encodeFixedBlock encodes raw in the fixed-width mode whatever its size,
// as a block (header, exponent stream, sign+mantissa bytes).
func encodeFixedBlock(raw []byte) []byte {
	n := len(raw) / 2
	exp, sm := make([]byte, n), make([]byte, n)
	for i := range n {
		w := binary.LittleEndian.Uint16(raw[2*i:])
		exp[i] = byte(w >> 7)
		sm[i] = byte(w>>8)&0x80 | byte(w)&0x7f
	}
	es := encodeFixed(nil, exp)
	el := len(es)
	dst := []byte{compExpFix, byte(el), byte(el >> 8), byte(el >> 16)}
	return append(append(dst, es...), sm...)
}

// skewedBF16 draws words whose exponents follow a wide distribution (16+
// values in use), so that k = 4 is the shorter code.
func skewedBF16(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, 2*n)
	for i := range n {
		e := 100 + r.IntN(15) // 15 exponents about equally: k = 4 holds them all
		if r.IntN(50) == 0 {
			e = r.IntN(256)
		}
		w := uint16(e)<<7 | uint16(r.Uint32())&0x807f
		binary.LittleEndian.PutUint16(b[2*i:], w)
	}
	return b
}

func TestFixedRoundTrip(t *testing.T) {
	cases := map[string]struct {
		raw []byte
		k   byte
	}{
		"normal":           {normalBF16(compBlockBytes/2, 0.02, 11), 3},
		"normal-odd":       {normalBF16(777, 0.5, 12), 3},
		"normal-1..40":     {nil, 3},
		"wide":             {skewedBF16(compBlockBytes/2, 13), 4},
		"wide-odd":         {skewedBF16(1001, 14), 4},
		"tiny-all-escapes": {normalBF16(4096, 1e-30, 15), 3},
	}
	var dec blockDecoder
	check := func(name string, raw []byte, wantK byte) {
		src := encodeFixedBlock(raw)
		if wantK != 0 && src[compHeader] != wantK {
			t.Errorf("%s: k = %d, want %d", name, src[compHeader], wantK)
		}
		got := make([]byte, len(raw))
		crc, err := dec.decodeBlock(got, src)
		if err != nil || !bytes.Equal(got, raw) || crc != crc32.Checksum(raw, crcTable) {
			t.Fatalf("%s: err %v, equal %v", name, err, bytes.Equal(got, raw))
		}
	}
	for name, c := range cases {
		if c.raw != nil {
			check(name, c.raw, c.k)
		}
	}
	// Every short length, so each tail path and padding case runs.
	for n := 1; n <= 40; n++ {
		check("normal-short", normalBF16(n, 0.02, uint64(n)), 0)
		check("wide-short", skewedBF16(n, uint64(n)), 0)
	}
}

// The encoder takes the fixed-width mode on normal weights, close to
// huff0's size, and old huff0 blocks still decode bit for bit.
func TestFixedChoice(t *testing.T) {
	raw := normalBF16(compBlockBytes/2, 0.02, 16)
	var enc blockEncoder
	huff := blockEncoder{huffOnly: true}
	fix, old := enc.encodeBlock(nil, raw), huff.encodeBlock(nil, raw)
	if fix[0] != compExpFix || old[0] != compExpHuff {
		t.Fatalf("modes %d and %d, want %d and %d", fix[0], old[0], compExpFix, compExpHuff)
	}
	if r := float64(len(fix)) / float64(len(old)); r > 1+fixedSlack || float64(len(fix)) > 0.75*float64(len(raw)) {
		t.Errorf("fixed block %d bytes, huff0 %d (%.3f×), raw %d", len(fix), len(old), r, len(raw))
	}
	t.Logf("fixed %.4f, huff0 %.4f of raw", float64(len(fix))/float64(len(raw)), float64(len(old))/float64(len(raw)))
	var dec blockDecoder
	for _, src := range [][]byte{old, fix, old} { // the decoder switches modes
		got := make([]byte, len(raw))
		if _, err := dec.decodeBlock(got, src); err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("mode %d: err %v", src[0], err)
		}
	}
	// Uniform words do not shrink: stored raw, not fixed-width.
	uni := make([]byte, 1<<14)
	for i := range uni {
		uni[i] = byte(rand.Uint32())
	}
	if m := enc.encodeBlock(nil, uni)[0]; m != compExpRaw {
		t.Errorf("uniform block in mode %d", m)
	}
}

// A corrupt fixed-width block is refused (errBlockCorrupt, then
// ErrBadCheckpoint from the loader), never a panic.
func TestFixedCorrupt(t *testing.T) {
	raw := normalBF16(1000, 0.02, 17)
	src := encodeFixedBlock(raw)
	es := compHeader
	nescAt := es + 1 + 7
	nesc := int(binary.LittleEndian.Uint32(src[nescAt:]))
	if nesc == 0 {
		t.Fatal("test block has no escapes")
	}
	var dec blockDecoder
	got := make([]byte, len(raw))
	bad := map[string][]byte{}
	k5 := bytes.Clone(src)
	k5[es] = 5
	bad["k=5"] = k5
	k4 := bytes.Clone(src)
	k4[es] = 4
	bad["k=4 on a k=3 stream"] = k4
	// One escape fewer in the count (the stream lengths adjusted to match):
	// the codes ask for an escape that is not there.
	short := bytes.Clone(src)
	binary.LittleEndian.PutUint32(short[nescAt:], uint32(nesc-1))
	el := len(src) - compHeader - len(raw)/2 - 1
	short = append(short[:compHeader+el], short[compHeader+el+1:]...)
	short[1], short[2], short[3] = byte(el), byte(el>>8), byte(el>>16)
	bad["escape missing"] = short
	// One escape more: the codes leave one unused.
	long := bytes.Clone(src[:compHeader+el+1])
	long = append(long, 0x55)
	long = append(long, src[compHeader+el+1:]...)
	binary.LittleEndian.PutUint32(long[nescAt:], uint32(nesc+1))
	el2 := el + 2
	long[1], long[2], long[3] = byte(el2), byte(el2>>8), byte(el2>>16)
	bad["escape extra"] = long
	huge := bytes.Clone(src)
	binary.LittleEndian.PutUint32(huge[nescAt:], 1<<31)
	bad["escape count huge"] = huge
	for name, b := range bad {
		if _, err := dec.decodeBlock(got, b); !errors.Is(err, errBlockCorrupt) {
			t.Errorf("%s: err %v, want errBlockCorrupt", name, err)
		}
	}
	// A flipped code bit decodes (every index is in the table) but not to
	// the block's checksum.
	flip := bytes.Clone(src)
	flip[es+1+7+4+10] ^= 0x01
	if crc, err := dec.decodeBlock(got, flip); err == nil && crc == crc32.Checksum(raw, crcTable) {
		t.Error("flipped code bit decoded to the right checksum")
	}
}
