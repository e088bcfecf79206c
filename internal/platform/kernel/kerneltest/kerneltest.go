// Package kerneltest runs a test against every kernel implementation of a
// package, in the manner of the standard library's cryptotest: each
// available implementation becomes a named subtest with that
// implementation selected; an implementation this CPU should run but that is
// unavailable (for example one whose start-up self-check failed) is a test
// failure, not a skip; implementations the CPU lacks are reported as skipped
// subtests with the reason.
package kerneltest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/k3go/k3/internal/platform/cpu"
	"github.com/k3go/k3/internal/platform/kernel"
)

// Package is the kernel-selection surface of tensor or quant.
type Package struct {
	Name    string
	Status  func() []kernel.Status
	Set     func(name string) (restore func(), err error)
	Current func() string
}

// Statuses adapts a public package's ImplementationStatus (tensor's and
// quant's ImplStatus have kernel.Status's fields) to Package.Status.
func Statuses[S kernel.StatusLike](f func() []S) func() []kernel.Status {
	return func() []kernel.Status {
		all := f()
		out := make([]kernel.Status, len(all))
		for i, s := range all {
			out[i] = kernel.Status(s)
		}
		return out
	}
}

// AllImplementations runs f once per implementation of pkg, as subtests
// named after the implementations, with that implementation selected.
func AllImplementations(t *testing.T, pkg Package, f func(t *testing.T)) {
	t.Helper()
	for _, s := range pkg.Status() {
		if !s.Available {
			if ok, _ := cpu.Supported(s.Name); ok {
				t.Errorf("%s: implementation %q should run on this CPU but is unavailable: %s", pkg.Name, s.Name, s.Reason)
				continue
			}
			t.Run(s.Name, func(t *testing.T) { t.Skipf("%s not available here: %s", s.Name, s.Reason) })
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			restore, err := pkg.Set(s.Name)
			if err != nil {
				t.Fatal(err)
			}
			defer restore()
			f(t)
		})
	}
}

// CheckSelected fails unless pkg selected the implementation this CPU,
// build and environment call for (internal/platform/cpu.Expected): a machine with
// AVX-512 must run the AVX-512 kernels, one with AVX2 the AVX2 kernels.
func CheckSelected(t *testing.T, pkg Package) {
	t.Helper()
	if got, want := pkg.Current(), cpu.Expected(); got != want {
		var why string
		for _, s := range pkg.Status() {
			if s.Name == want {
				why = s.Reason
			}
		}
		t.Errorf("%s selected kernel %q, want %q on this machine (%s)", pkg.Name, got, want, why)
	}
}

// FuzzSeedEnv and FuzzCountEnv set the inputs of [RandomArgs]: the seed of
// its generator (default 1) and the number of calls (default: the test's).
const (
	FuzzSeedEnv  = "K3_FUZZ_SEED"
	FuzzCountEnv = "K3_FUZZ_N"
)

// RandomArgs calls body n times, each in a subtest, with a generator from
// which it draws the arguments of a fuzz target's body. It stands in for
// coverage-guided fuzzing where that cannot run: under qemu-user the fuzzer
// cannot re-execute its own binary, so CI runs the arm64 kernels' fuzz
// bodies this way with a fresh K3_FUZZ_SEED. By default (seed 1) the
// inputs are the same on every run; a failure names the seed and the call,
// so K3_FUZZ_SEED and -run reproduce it.
func RandomArgs(t *testing.T, n int, body func(t *testing.T, rng *rand.Rand)) {
	t.Helper()
	seed := uint64(1)
	if s := os.Getenv(FuzzSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", FuzzSeedEnv, s, err)
		}
		seed = v
	}
	if s := os.Getenv(FuzzCountEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			t.Fatalf("%s=%q: want a count", FuzzCountEnv, s)
		}
		n = v
	}
	for k := 0; k < n; k++ {
		t.Run(fmt.Sprintf("seed%d/%d", seed, k), func(t *testing.T) {
			body(t, rand.New(rand.NewPCG(seed, uint64(k))))
		})
	}
}
