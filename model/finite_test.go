package model

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCheckFinite(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 7, 129} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i) - 3.5
		}
		if err := checkFinite(v, 4, "op"); err != nil {
			t.Fatalf("n=%d: finite values refused: %v", n, err)
		}
		for i := 0; i < n; i++ {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
				old := v[i]
				v[i] = bad
				err := checkFinite(v, 4, "op")
				v[i] = old
				if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "op: row") {
					t.Fatalf("n=%d: %v at %d: got %v", n, bad, i, err)
				}
			}
		}
	}
	// The largest finite values must not overflow the check.
	if !allFinite([]float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}) {
		t.Fatal("extreme finite values refused")
	}
}

// BenchmarkCheckFinite measures the check on one row of the released
// model's hidden width (7168 values): a layer checks about five such
// vectors per token row.
func BenchmarkCheckFinite(b *testing.B) {
	v := make([]float32, 7168)
	for i := range v {
		v[i] = float32(i) * 1e-3
	}
	b.SetBytes(int64(4 * len(v)))
	for b.Loop() {
		if !allFinite(v) {
			b.Fatal("refused")
		}
	}
}
