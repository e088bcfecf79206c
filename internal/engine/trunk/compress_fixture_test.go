package trunk

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
	"github.com/klauspost/compress/huff0"
)

// entropy0 is the order-0 entropy of symbols, in bits per symbol.
func entropy0(counts []int) float64 {
	var n float64
	for _, c := range counts {
		n += float64(c)
	}
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// huffSize is what huff0 stores for b (its length when it does not
// compress), checked by decoding.
func huffSize(t *testing.T, b []byte) int {
	var s huff0.Scratch
	out, _, err := huff0.Compress1X(b, &s)
	if errors.Is(err, huff0.ErrIncompressible) {
		return len(b)
	}
	if err != nil {
		t.Fatal(err)
	}
	out = bytes.Clone(out)
	d, rest, err := huff0.ReadTable(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Decoder().Decompress1X(make([]byte, 0, len(b)), rest)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("huff0 round trip failed: %v", err)
	}
	return len(out)
}

// TestExpertCompressionReal measures, on the 64 rows of real released
// MXFP4 expert bytes in fixtures/mxfp4.json, the order-0 entropy of the
// 4-bit values and the scale bytes and what huff0 achieves on the packed
// bytes and the scales. The experts are not compressed: the best case is a
// small saving for rewriting 1.45 TB, and it must stay small for that
// decision to hold.
func TestExpertCompressionReal(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "mxfp4.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Packed, Scales struct{ Data []int }
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	packed, scales := make([]byte, len(f.Packed.Data)), make([]byte, len(f.Scales.Data))
	nib, sc := make([]int, 16), make([]int, 256)
	for i, v := range f.Packed.Data {
		packed[i] = byte(v)
		nib[v&15]++
		nib[v>>4]++
	}
	for i, v := range f.Scales.Data {
		scales[i] = byte(v)
		sc[v]++
	}
	hn, hs := entropy0(nib), entropy0(sc)
	bound := (hn*float64(2*len(packed)) + hs*float64(len(scales))) / 8 / float64(len(packed)+len(scales))
	p, s := huffSize(t, packed), huffSize(t, scales)
	ratio := float64(p+s) / float64(len(packed)+len(scales))
	t.Logf("real MXFP4 expert bytes (%d packed, %d scales): entropy %.3f bits per 4-bit value, %.3f bits per scale byte; order-0 bound %.3f of the size; huff0 %.3f on packed bytes, %.3f on scales, %.3f overall",
		len(packed), len(scales), hn, hs, bound, float64(p)/float64(len(packed)), float64(s)/float64(len(scales)), ratio)
	if ratio < bound-0.01 {
		t.Errorf("huff0 ratio %.3f beats the order-0 bound %.3f: the measurement is wrong", ratio, bound)
	}
	if ratio < 0.85 {
		t.Errorf("the real experts compress to %.3f: compressing them may pay after all (revisit the decision in docs/PERFORMANCE.md)", ratio)
	}
}

// TestTrunkCompressionOracle measures the exponent entropy and the block
// coder's ratio on the BF16 matrices of the tiny-mxfp4 oracle checkpoint.
// They come from the PyTorch reference's initialisation, not training:
// the fixtures hold no trained BF16 trunk bytes, so the real ratio comes
// from k3 pack --compress --dry-run on the released checkpoint.
func TestTrunkCompressionOracle(t *testing.T) {
	ck, err := iox.OpenCheckpoint(fixtures.Path(t, "oracle/tiny-mxfp4"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var all []byte
	for _, name := range ck.Names() {
		e, _ := ck.Lookup(name)
		if e.Stored != "BF16" || len(e.Shape) != 2 {
			continue
		}
		tt, err := ck.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, tt.Data...)
	}
	if len(all) == 0 {
		t.Fatal("no BF16 matrices in the oracle")
	}
	exp := make([]int, 256)
	for i := 0; i+1 < len(all); i += 2 {
		exp[(uint16(all[i])|uint16(all[i+1])<<8)>>7&0xff]++
	}
	h := entropy0(exp)
	var enc blockEncoder
	stored, cp := compressImage(&enc, nil, all[:len(all)&^1])
	ratio := float64(cp.stored) / float64(len(all))
	t.Logf("oracle BF16 matrices (%d bytes, PyTorch init): exponent entropy %.3f bits, bound %.3f; block coder %.3f (%d bytes)",
		len(all), h, (h+8)/16, ratio, len(stored))
	if ratio < (h+8)/16-0.005 || ratio > 0.9 {
		t.Errorf("ratio %.3f against the entropy bound %.3f", ratio, (h+8)/16)
	}
}
