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
	HasNEON = asm && ARM64.ASIMD
}
