package kerneltest

import (
	"math"
	"testing"

	"github.com/k3go/k3/internal/platform/par"
)

// Guard is how many floats of Sentinel surround a dst from Guarded.
const Guard = 64

// Sentinel is the NaN (with a payload) that fills guard bands: no kernel
// result has this bit pattern by accident.
var Sentinel = math.Float32frombits(0x7FC0DEAD)

// Guarded returns a dst of length n (capacity n) inside Guard floats of
// Sentinel on each side, and the buffer holding both.
func Guarded(n int) (buf, dst []float32) {
	buf = make([]float32, n+2*Guard)
	for i := range buf {
		buf[i] = Sentinel
	}
	return buf, buf[Guard : Guard+n : Guard+n]
}

// CheckGuards fails the test if a kernel wrote outside the n floats of dst
// in buf (from Guarded).
func CheckGuards(t testing.TB, buf []float32, n int) {
	t.Helper()
	for i, v := range buf {
		if (i < Guard || i >= Guard+n) && math.Float32bits(v) != math.Float32bits(Sentinel) {
			t.Fatalf("guard band overwritten at %d (dst length %d)", i-Guard, n)
		}
	}
}

// Same reports whether a and b are the same float: equal bits, or both NaN
// (NaN payloads are not part of the kernels' contract).
func Same(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// GrainRunner runs a pool with its own grain instead of the kernel's, so
// that tests can split the rows in odd places.
type GrainRunner struct {
	Pool  *par.Pool
	Grain int
}

// Run implements par.Runner.
func (g GrainRunner) Run(n, _ int, job par.RangeJob) { g.Pool.Run(n, g.Grain, job) }
