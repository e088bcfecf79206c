package cpu

import "testing"

func TestSupportedConsistent(t *testing.T) {
	if ok, _ := Supported(Generic); !ok {
		t.Fatal("generic must always be supported")
	}
	if ok, reason := Supported("sse9"); ok || reason == "" {
		t.Fatal("unknown kernel set reported as supported")
	}
	if ok, _ := Supported(AVX512); ok && !HasAVX2 {
		t.Fatal("AVX-512 kernels without AVX2")
	}
	if ok, _ := Supported(NEON); ok && HasAVX2 {
		t.Fatal("NEON kernels on an amd64 CPU")
	}
	if ok, _ := Supported(Best()); !ok {
		t.Fatalf("Best() = %s is not supported", Best())
	}
	t.Logf("best %s, expected %s (AVX2+FMA %v, AVX-512 %v, arm64 %+v)", Best(), Expected(), HasAVX2, HasAVX512, ARM64)
}

func TestOverride(t *testing.T) {
	t.Setenv(EnvVar, " Generic ")
	if Override() != Generic || Expected() != Generic {
		t.Fatalf("override %q, expected %q", Override(), Expected())
	}
	t.Setenv(EnvVar, "nonsense")
	if Expected() != Best() {
		t.Fatal("an unknown override must fall back to Best")
	}
	if ok, _ := Supported(AVX512); !ok {
		t.Setenv(EnvVar, AVX512)
		if Expected() != Best() {
			t.Fatal("an unsupported override must fall back to Best")
		}
	}
}
