package kernel

import (
	"errors"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/platform/cpu"
)

func TestRegistrySelection(t *testing.T) {
	t.Setenv(cpu.EnvVar, "")
	r := New("pkg", "g")
	r.Add(cpu.AVX2, "a2")
	r.Add(cpu.AVX512, "a5")
	r.Add(cpu.NEON, "n")
	r.Init(func(s string) error { return nil })
	if got, want := r.CurrentName(), cpu.Best(); got != want {
		t.Fatalf("selected %s, want %s", got, want)
	}
	restore, err := r.Set(cpu.Generic)
	if err != nil || r.Current() != "g" {
		t.Fatal("Set(generic) failed", err)
	}
	restore()
	if r.CurrentName() != cpu.Best() {
		t.Fatal("restore did not restore")
	}
	if _, err := r.Set("nope"); err == nil {
		t.Fatal("unknown name accepted")
	}
	for _, s := range r.All() {
		ok, _ := cpu.Supported(s.Name)
		if s.Available != ok {
			t.Fatalf("%s: available %v, supported %v", s.Name, s.Available, ok)
		}
	}
}

func TestRegistrySelfCheckFailure(t *testing.T) {
	fast := cpu.Best()
	if fast == cpu.Generic {
		t.Skip("needs a machine with SIMD kernels (AVX2 or NEON)")
	}
	t.Setenv(cpu.EnvVar, "")
	r := New("pkg", "g")
	r.Add(fast, "a2")
	r.Init(func(s string) error {
		if s == "a2" {
			return errors.New("wrong numbers")
		}
		return nil
	})
	if r.CurrentName() != cpu.Generic {
		t.Fatalf("a failing implementation was selected: %s", r.CurrentName())
	}
	if _, err := r.Set(fast); err == nil || !strings.Contains(err.Error(), "wrong numbers") {
		t.Fatalf("Set of a failed implementation: %v", err)
	}
	// A panic or a memory fault in the check is a failure too.
	r2 := New("pkg", "g")
	r2.Add(fast, "a2")
	r2.Init(func(s string) error {
		var p *int
		return errors.New(string(rune(*p)))
	})
	if r2.CurrentName() != cpu.Generic || !strings.Contains(r2.All()[1].Reason, "panic") {
		t.Fatalf("panicking check: selected %s, status %v", r2.CurrentName(), r2.All())
	}
}

func TestRegistryOverride(t *testing.T) {
	t.Setenv(cpu.EnvVar, "generic")
	r := New("pkg", "g")
	r.Add(cpu.AVX2, "a2")
	r.Init(nil)
	if r.CurrentName() != cpu.Generic {
		t.Fatal("K3_KERNELS=generic ignored")
	}
	t.Setenv(cpu.EnvVar, "bogus")
	r = New("pkg", "g")
	r.Init(nil)
	if r.CurrentName() != cpu.Generic || !strings.Contains(r.All()[0].Reason, "ignored") {
		t.Fatalf("bogus override: %v", r.All())
	}
}
