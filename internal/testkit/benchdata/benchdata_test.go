package benchdata

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

func TestNoSubnormals(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	if HasSubnormalBF16(BF16Weights(rng, 1<<16)) {
		t.Error("BF16Weights drew a subnormal")
	}
	if HasSubnormalF32Bytes(F32Weights(rng, 1<<16)) {
		t.Error("F32Weights drew a subnormal")
	}
	if HasSubnormalF32(Activations(rng, 1<<16)) {
		t.Error("Activations drew a subnormal")
	}
	if _, sc := MXFP4(rng, 64, 1024); HasSubnormalMXFP4(sc) {
		t.Error("MXFP4 drew a subnormal scale")
	}
}

// TestDetectors: the checks must see the subnormals that byte&0x3f weights
// are full of, or TestNoSubnormals proves nothing.
func TestDetectors(t *testing.T) {
	b := []byte{0x3f, 0x00} // BF16 0x003f: subnormal
	if !HasSubnormalBF16(b) {
		t.Error("HasSubnormalBF16 missed 0x003f")
	}
	if HasSubnormalBF16([]byte{0x80, 0x3f, 0, 0}) { // 1.0 and +0
		t.Error("HasSubnormalBF16 flagged 1.0 or zero")
	}
	if !HasSubnormalF32([]float32{math.Float32frombits(1)}) || HasSubnormalF32([]float32{0, 1, -2}) {
		t.Error("HasSubnormalF32 is wrong")
	}
	f := make([]byte, 4)
	binary.LittleEndian.PutUint32(f, 5)
	if !HasSubnormalF32Bytes(f) {
		t.Error("HasSubnormalF32Bytes missed a subnormal")
	}
	if !HasSubnormalMXFP4([]byte{121, 1}) || HasSubnormalMXFP4([]byte{120, 121, 122}) {
		t.Error("HasSubnormalMXFP4 is wrong")
	}
}

// TestDistributions: the weights have the intended spread and the MXFP4
// codes the released frequencies, so the benchmarks do the work real
// weights cause.
func TestDistributions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := BF16Weights(rng, 1<<16)
	var ss float64
	for i := 0; i < len(w); i += 2 {
		v := math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[i:])) << 16)
		ss += float64(v) * float64(v)
	}
	if sd := math.Sqrt(ss / float64(len(w)/2)); math.Abs(sd-WeightSigma) > 0.001 {
		t.Errorf("BF16 weights σ %.4f, want %.4f", sd, WeightSigma)
	}
	packed, scales := MXFP4(rng, 256, 1024)
	var n [16]int
	for _, b := range packed {
		n[b&15]++
		n[b>>4]++
	}
	for code, want := range nibbleFreq {
		got := float64(n[code]) / float64(2*len(packed)) * 1e4
		if math.Abs(got-float64(want)) > 60 {
			t.Errorf("nibble %d: %.0f per 10k, want %d", code, got, want)
		}
	}
	var s121 int
	for _, s := range scales {
		if s == 121 {
			s121++
		}
	}
	if f := float64(s121) / float64(len(scales)); f < 0.8 || f > 0.89 {
		t.Errorf("scale 121 in %.2f of groups, want about 0.85", f)
	}
}
