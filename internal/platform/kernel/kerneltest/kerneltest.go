// Package kerneltest runs a test against every kernel implementation of a
// package, in the manner of the standard library's cryptotest: each
// available implementation becomes a named subtest with that
// implementation selected; an implementation this CPU should run but that is
// unavailable (for example one whose start-up self-check failed) is a test
// failure, not a skip; implementations the CPU lacks are reported as skipped
// subtests with the reason.
package kerneltest

import (
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
