package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

func TestBF16RoundTrip(t *testing.T) {
	for _, bits := range []uint16{0, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x0001, 0x7f7f} {
		if got := F32ToBF16(BF16ToF32(bits)); got != bits {
			t.Errorf("bf16 %#04x -> %v -> %#04x", bits, BF16ToF32(bits), got)
		}
	}
	if !math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))) {
		t.Error("NaN did not survive bf16 rounding")
	}
	// Ties to even: 1 + 2^-8 lies halfway between two bf16 values.
	if got := F32ToBF16(math.Float32frombits(0x3f808000)); got != 0x3f80 {
		t.Errorf("tie rounded to %#04x, want 0x3f80", got)
	}
	if got := F32ToBF16(math.Float32frombits(0x3f818000)); got != 0x3f82 {
		t.Errorf("tie rounded to %#04x, want 0x3f82", got)
	}
}

func TestF16ToF32AllPatterns(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got := F16ToF32(uint16(h))
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		exp := (h >> 10) & 0x1f
		man := float64(h & 0x3ff)
		var want float64
		switch {
		case exp == 0x1f && man == 0:
			want = math.Inf(int(sign))
		case exp == 0x1f:
			if !math.IsNaN(float64(got)) {
				t.Fatalf("%#04x: want NaN, got %v", h, got)
			}
			continue
		case exp == 0:
			want = sign * man * math.Pow(2, -24)
		default:
			want = sign * (1 + man/1024) * math.Pow(2, float64(exp-15))
		}
		if float64(got) != want || math.Signbit(float64(got)) != (sign < 0) {
			t.Fatalf("%#04x: got %v want %v", h, got, want)
		}
	}
}

func TestE8M0(t *testing.T) {
	if E8M0ToF32(127) != 1 || E8M0ToF32(128) != 2 || E8M0ToF32(121) != 1.0/64 {
		t.Fatal("E8M0 scale values wrong")
	}
	if got := float64(E8M0ToF32(0)); got != math.Pow(2, -127) {
		t.Fatalf("E8M0(0) = %g, want 2^-127", got)
	}
	if !math.IsNaN(float64(E8M0ToF32(255))) {
		t.Fatal("E8M0(255) should be NaN")
	}
}

func randMat(rng *rand.Rand, dt DType, rows, cols int) (Mat, []float64) {
	m := Mat{DType: dt, Rows: rows, Cols: cols, Data: make([]byte, rows*cols*dt.Size())}
	vals := make([]float64, rows*cols)
	for i := range vals {
		f := float32(rng.NormFloat64())
		switch dt {
		case BF16:
			b := F32ToBF16(f)
			binary.LittleEndian.PutUint16(m.Data[2*i:], b)
			vals[i] = float64(BF16ToF32(b))
		case F32:
			binary.LittleEndian.PutUint32(m.Data[4*i:], math.Float32bits(f))
			vals[i] = float64(f)
		}
	}
	return m, vals
}

type serialSplit struct{ grain int }

// Run splits in a different way than the pool would, to prove results do
// not depend on the split.
func (s serialSplit) Run(n, grain int, job RangeJob) {
	for lo := 0; lo < n; lo += s.grain {
		job.Range(lo, min(lo+s.grain, n))
	}
}

func TestMatMulAgainstFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []DType{F32, BF16} {
		for _, shape := range [][2]int{{1, 1}, {3, 7}, {17, 16}, {33, 100}, {64, 256}} {
			rows, cols := shape[0], shape[1]
			m, vals := randMat(rng, dt, rows, cols)
			const n = 3
			x := make([]float32, n*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			got := make([]float32, n*rows)
			MatMul(nil, got, m, x, n)
			for tok := 0; tok < n; tok++ {
				single := make([]float32, rows)
				MatVec(serialSplit{grain: 5}, single, m, x[tok*cols:(tok+1)*cols])
				for r := 0; r < rows; r++ {
					var want, mag float64
					for c := 0; c < cols; c++ {
						p := vals[r*cols+c] * float64(x[tok*cols+c])
						want += p
						mag += math.Abs(p)
					}
					g := got[tok*rows+r]
					if math.Abs(float64(g)-want) > 1e-6*mag+1e-30 {
						t.Fatalf("%s %dx%d tok %d row %d: got %v want %v", dt, rows, cols, tok, r, g, want)
					}
					if math.Float32bits(single[r]) != math.Float32bits(g) {
						t.Fatalf("%s %dx%d: batched and single-token results differ at tok %d row %d", dt, rows, cols, tok, r)
					}
				}
			}
		}
	}
}
