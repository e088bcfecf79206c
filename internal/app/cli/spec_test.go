package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/k3go/k3"
)

func TestSpecFlag(t *testing.T) {
	for in, want := range map[string]int{"auto": k3.SpeculateAuto, "AUTO": k3.SpeculateAuto, "off": 0, "0": 0, "8": 8, " 3 ": 3, "16": 16} {
		if got, err := ParseSpec(in); err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "on", "1.5", "17"} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f SpecFlag
	f.Register(fs, k3.SpeculateAuto)
	if f.N != k3.SpeculateAuto || f.String() != "auto" {
		t.Fatalf("default %d %q", f.N, f.String())
	}
	if err := fs.Parse([]string{"--spec", "off"}); err != nil || f.N != 0 || f.String() != "off" {
		t.Fatalf("--spec off: %v %d", err, f.N)
	}
	if err := fs.Parse([]string{"--spec", "nope"}); err == nil {
		t.Fatal("--spec nope accepted")
	}
}
