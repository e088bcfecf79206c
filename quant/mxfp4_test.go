package quant

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

type fixtureTensor struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type mxfp4Fixture struct {
	Rows         int           `json:"rows"`
	PackedCols   int           `json:"packed_cols"`
	ScaleCols    int           `json:"scale_cols"`
	LogicalWidth int           `json:"logical_width"`
	GroupSize    int           `json:"group_size"`
	LUT          []float64     `json:"e2m1_lut"`
	Packed       fixtureTensor `json:"packed"`
	Scales       fixtureTensor `json:"scales"`
	Expected     fixtureTensor `json:"expected"`
	Swapped      struct {
		First64 []float64 `json:"first64"`
	} `json:"expected_swapped_nibbles"`
}

func loadMXFP4Fixture(t *testing.T) (Matrix, mxfp4Fixture) {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Path(t, "mxfp4.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f mxfp4Fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	m := Matrix{Rows: f.Rows, Cols: f.LogicalWidth, Packed: make([]byte, len(f.Packed.Data)), Scales: make([]byte, len(f.Scales.Data))}
	for i, v := range f.Packed.Data {
		m.Packed[i] = byte(v)
	}
	for i, v := range f.Scales.Data {
		m.Scales[i] = byte(v)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	return m, f
}

// TestFixtureDequantExact checks the real checkpoint bytes dequantise to the
// fixture's values bit for bit, and that the swapped nibble order does not.
func TestFixtureDequantExact(t *testing.T) {
	m, f := loadMXFP4Fixture(t)
	if f.GroupSize != GroupSize || f.PackedCols*2 != m.Cols || f.ScaleCols*GroupSize != m.Cols {
		t.Fatalf("fixture geometry %+v does not match the format", f)
	}
	for i, v := range f.LUT {
		if float32(v) != E2M1[i] || math.Signbit(v) != math.Signbit(float64(E2M1[i])) {
			t.Fatalf("E2M1[%d] = %v, fixture %v", i, E2M1[i], v)
		}
	}
	row := make([]float32, m.Cols)
	for r := 0; r < m.Rows; r++ {
		m.DequantizeRow(row, r)
		for c, got := range row {
			want := float32(f.Expected.Data[r*m.Cols+c])
			if math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
				t.Fatalf("row %d col %d: got %v want %v", r, c, got, want)
			}
		}
	}
	m.DequantizeRow(row, 0)
	mismatches := 0
	for c, v := range f.Swapped.First64 {
		if row[c] != float32(v) {
			mismatches++
		}
	}
	if mismatches == 0 {
		t.Fatal("dequantised row 0 matches the swapped-nibble answer: nibble order is wrong")
	}
}

// TestFixtureMatVec multiplies the real bytes by a random vector and
// compares with an f64 dot product over the exact dequantised values.
func TestFixtureMatVec(t *testing.T) {
	m, _ := loadMXFP4Fixture(t)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, m.Cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	got := make([]float32, m.Rows)
	MatVec(nil, got, m, x)
	row := make([]float32, m.Cols)
	for r := 0; r < m.Rows; r++ {
		m.DequantizeRow(row, r)
		var want, mag float64
		for c := range row {
			want += float64(row[c]) * float64(x[c])
			mag += math.Abs(float64(row[c]) * float64(x[c]))
		}
		if d := math.Abs(float64(got[r]) - want); d > 1e-6*mag+1e-30 {
			t.Fatalf("row %d: got %v want %v (|Δ| %g, Σ|wx| %g)", r, got[r], want, d, mag)
		}
	}
}

// TestSkipScale checks that scale byte 255 zeroes its group even when the
// activations there are NaN or infinite.
func TestSkipScale(t *testing.T) {
	m := Matrix{Rows: 1, Cols: 64, Packed: make([]byte, 32), Scales: []byte{255, 127}}
	for i := range m.Packed {
		m.Packed[i] = 0x77 // 6, 6
	}
	x := make([]float32, 64)
	for i := range 32 {
		x[i] = float32(math.Inf(1))
	}
	for i := 32; i < 64; i++ {
		x[i] = 1
	}
	y := make([]float32, 1)
	MatVec(nil, y, m, x)
	if y[0] != 6*32 {
		t.Fatalf("got %v, want %v (group 0 must be skipped)", y[0], 6*32)
	}
}
