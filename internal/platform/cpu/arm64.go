//go:build arm64

package cpu

import "github.com/klauspost/cpuid/v2"

func init() {
	c := &cpuid.CPU
	ARM64 = ARM64Features{
		ASIMD:   c.Supports(cpuid.ASIMD),
		ASIMDDP: c.Supports(cpuid.ASIMDDP),
		BF16:    c.Supports(cpuid.BF16),
		SVE:     c.Supports(cpuid.SVE),
	}
	// Advanced SIMD is part of every ARMv8-A core Go runs on (Go's own
	// runtime uses it), so the NEON kernels do not wait for cpuid: it reads
	// the features on Linux and macOS only, and reports none on Windows and
	// the BSDs.
	HasNEON = asm
}
