// Package cpu reports, once at start-up, which SIMD kernel sets this CPU and
// build can run, and the K3_KERNELS override. The tensor and quant packages
// register their implementations under the names used here.
//
// On amd64 the ISA bits come from golang.org/x/sys/cpu, which honours
// GODEBUG=cpu.<feature>=off (for example GODEBUG=cpu.avx512f=off forces the
// AVX2 kernels on an AVX-512 machine). On arm64 they come from
// github.com/klauspost/cpuid/v2 (HWCAP on Linux, sysctl on macOS), which
// also reports the BF16 and SVE extensions that x/sys/cpu lacks. Under the
// purego build tag, and on architectures without assembly kernels, only
// "generic" exists.
package cpu

import (
	"os"
	"strings"

	"golang.org/x/sys/cpu"
)

// Implementation names, fastest last.
const (
	Generic = "generic"
	AVX2    = "avx2"
	AVX512  = "avx512"
	// NEON is the arm64 Advanced SIMD kernel set (128-bit vectors, FMLA).
	NEON = "neon"
)

// EnvVar names the environment variable that overrides the kernel choice:
// K3_KERNELS=generic|avx2|avx512|neon. A name the CPU cannot run is ignored (the
// best supported implementation is used and the reason recorded).
const EnvVar = "K3_KERNELS"

var (
	// HasAVX2 reports AVX2 and FMA with OS support for YMM state: the
	// "avx2" kernels can run.
	HasAVX2 = asm && cpu.X86.HasAVX && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	// HasAVX512 reports AVX-512 F, BW and VL with OS support for ZMM and
	// opmask state (x/sys/cpu checks XCR0): the "avx512" kernels can run.
	HasAVX512 = HasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
	// HasNEON reports an arm64 build with assembly: the "neon" kernels can
	// run (Advanced SIMD is architectural on arm64). Set at start-up.
	HasNEON bool
	// ARM64 holds the arm64 extensions k3 looks at (all false elsewhere).
	ARM64 ARM64Features
)

// ARM64Features are the arm64 extensions reported by the CPU and OS (all
// false where klauspost/cpuid cannot read them: Windows, the BSDs). The
// NEON kernels need only ASIMD, which every arm64 core has; the others are
// reported (k3 doctor) but not used: BFDOT/BFMMLA round differently from k3's f32 FMA chain (see
// docs/PERFORMANCE.md), and SVE kernels do not exist yet.
type ARM64Features struct {
	ASIMD   bool // Advanced SIMD (NEON)
	ASIMDDP bool // SDOT/UDOT integer dot products
	BF16    bool // BFDOT, BFMMLA, BFCVT
	SVE     bool // Scalable Vector Extension
}

// Override returns the K3_KERNELS value, trimmed and lower-cased ("" when
// unset).
func Override() string { return strings.ToLower(strings.TrimSpace(os.Getenv(EnvVar))) }

// Supported reports whether this CPU and build can run the named kernel set,
// and if not, why.
func Supported(name string) (ok bool, reason string) {
	switch name {
	case Generic:
		return true, ""
	case AVX2:
		if !asm {
			return false, "built without assembly (purego or not amd64)"
		}
		if !HasAVX2 {
			return false, "CPU (or GODEBUG) lacks AVX2+FMA"
		}
		return true, ""
	case AVX512:
		if !asm {
			return false, "built without assembly (purego or not amd64)"
		}
		if !HasAVX512 {
			return false, "CPU (or GODEBUG) lacks AVX-512 F/BW/VL"
		}
		return true, ""
	case NEON:
		if !asm {
			return false, "built without assembly (purego or not arm64)"
		}
		if !HasNEON {
			return false, "not an arm64 CPU"
		}
		return true, ""
	}
	return false, "unknown kernel set"
}

// Best returns the fastest kernel set this CPU and build support, ignoring
// K3_KERNELS.
func Best() string {
	switch {
	case HasNEON:
		return NEON
	case HasAVX512:
		return AVX512
	case HasAVX2:
		return AVX2
	}
	return Generic
}

// Expected returns the kernel set a package should select at start-up: the
// K3_KERNELS override when the CPU supports it, else Best. Tests use it to
// fail when the fast path this machine should run is not the one selected.
func Expected() string {
	if o := Override(); o != "" {
		if ok, _ := Supported(o); ok {
			return o
		}
	}
	return Best()
}
