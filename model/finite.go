package model

import (
	"errors"
	"fmt"
)

// ErrNonFinite reports a NaN or an infinity in a pass's activations: a
// corrupt matrix (matrices are not scanned at load), a corrupt saved state
// or an overflow. The pass fails rather than route on, or return, garbage.
var ErrNonFinite = errors.New("non-finite values")

// allFinite reports whether v holds no NaN and no infinity. x·0 is 0 for
// every finite x and NaN otherwise, so one sum with no branch per element
// decides; four sums keep the adds independent.
func allFinite(v []float32) bool {
	var a, b, c, d float32
	i := 0
	for ; i+4 <= len(v); i += 4 {
		a += v[i] * 0
		b += v[i+1] * 0
		c += v[i+2] * 0
		d += v[i+3] * 0
	}
	for ; i < len(v); i++ {
		a += v[i] * 0
	}
	return a+b+c+d == 0
}

// checkFinite returns nil when the op's output rows (row-major, width
// values each) are finite, else ErrNonFinite naming the op and the first
// bad row and value. It runs once per op result, never inside a kernel.
func checkFinite(v []float32, width int, op string) error {
	if allFinite(v) {
		return nil
	}
	for i, x := range v {
		if x-x != 0 {
			return fmt.Errorf("%w: %s: row %d, value %d is %v", ErrNonFinite, op, i/width, i%width, x)
		}
	}
	return nil
}
