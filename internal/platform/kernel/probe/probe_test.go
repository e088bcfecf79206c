package probe

import (
	"testing"

	"github.com/k3go/k3/internal/platform/cpu"
)

// TestProbes runs the probes of every kernel set this machine supports on
// small inputs: buffers of odd lengths (the vector probes read whole blocks
// only) and a flop count that matches the set's vector width.
func TestProbes(t *testing.T) {
	want := map[string]float64{cpu.AVX2: 12 * 2 * 8, cpu.AVX512: 12 * 2 * 16, cpu.NEON: 16 * 2 * 4, cpu.Generic: 8 * 2}
	for name, perIter := range want {
		if ok, _ := cpu.Supported(name); !ok {
			continue
		}
		if got := FMA(name, 1000); got != 1000*perIter {
			t.Errorf("%s: FMA(1000) = %g flops, want %g", name, got, 1000*perIter)
		}
		for _, n := range []int{0, 1, 255, 256, 1000, 4096 + 100} {
			Read(name, make([]byte, n))
		}
	}
}
