package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestDoctorMemoryAndStorage: k3 doctor reports the machine's memory, the
// budget --budget auto would take, and the storage of --dir.
func TestDoctorMemoryAndStorage(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := runDoctor([]string{"--dir", t.TempDir(), "--probe-size", "1MiB", "--json"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var r doctorReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.RAMBytes <= 0 || r.RAMAvailable <= 0 || r.AutoBudget <= 0 || r.AutoBudget >= r.RAMAvailable || r.FreeBytes <= 0 || r.FSType == "" || r.OS != runtime.GOOS {
		t.Fatalf("report %+v", r)
	}
	var text bytes.Buffer
	printDoctor(&text, &r)
	if !strings.Contains(text.String(), "--budget auto: ") {
		t.Errorf("text report lacks the auto budget:\n%s", text.String())
	}
}

// TestPlatformNote: every system but Linux gets a note on what is slower
// there, naming its reads; Linux gets none.
func TestPlatformNote(t *testing.T) {
	if n := platformNote("linux"); n != "" {
		t.Errorf("linux: %q", n)
	}
	for goos, want := range map[string]string{"darwin": "F_NOCACHE", "windows": "buffered", "freebsd": "buffered", "openbsd": "--budget a size"} {
		if n := platformNote(goos); !strings.Contains(n, want) {
			t.Errorf("%s: %q lacks %q", goos, n, want)
		}
	}
	r := &doctorReport{OS: "windows", PlatformNote: platformNote("windows")}
	var text bytes.Buffer
	printDoctor(&text, r)
	if s := text.String(); !strings.Contains(s, "platform: Windows") || strings.Contains(s, "O_DIRECT refused") {
		t.Errorf("windows report:\n%s", s)
	}
	text.Reset()
	printDoctor(&text, &doctorReport{OS: "darwin", ODirect: true})
	if s := text.String(); !strings.Contains(s, "F_NOCACHE sequential") {
		t.Errorf("darwin report:\n%s", s)
	}
}

// TestDoctorAdvice: the advice names a real flag and agrees with the
// presets: everything resident is --preset max; otherwise --budget auto
// with what it gives here, set against the largest preset that fits (not
// labelled with a preset whose size it is not); the compression line is
// left to a trunk that streams at that budget.
func TestDoctorAdvice(t *testing.T) {
	small := testmodel.Dir(t)
	r := &doctorReport{Model: small, RAMAvailable: 30e9, RAMBytes: 32e9, ODirectSeqGBps: 2}
	if err := planFor(r, small); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	printDoctor(&text, r)
	if r.RecommendedFlag != "--preset max" || r.RecommendedPreset != "max" || r.TrunkStreams ||
		!strings.Contains(text.String(), "advice:   --preset max: everything resident") ||
		!strings.Contains(text.String(), "compress: not needed") {
		t.Errorf("a small checkpoint: %+v\n%s", r, text.String())
	}

	big := filepath.Join(t.TempDir(), "sparse")
	p := synth.Medium()
	p.SetLayers(8)
	p.Config.Experts = 128
	if _, err := synth.WriteSparse(big, p, 0); err != nil {
		t.Fatal(err)
	}
	r = &doctorReport{Model: big, RAMAvailable: 13e9, RAMBytes: 16e9, ODirectSeqGBps: 2}
	if err := planFor(r, big); err != nil {
		t.Fatal(err)
	}
	text.Reset()
	printDoctor(&text, r)
	advice := text.String()
	want := "advice:   --budget auto: " + human(r.RecommendedBudget) + " on this machine now (the largest preset that fits is laptop, 8.00 GB)"
	if r.FullBytes <= r.RecommendedBudget || r.RecommendedFlag != "--budget auto" || r.RecommendedPreset != "" || r.LargestPreset != "laptop" ||
		!strings.Contains(advice, want) {
		t.Errorf("a checkpoint larger than the machine: %+v\nwant %q in:\n%s", r, want, advice)
	}
	if strings.Contains(advice, human(r.RecommendedBudget)+" (laptop)") {
		t.Errorf("a budget labelled with a preset of another size:\n%s", advice)
	}
	// The compression line follows the plan at that budget.
	in, err := k3.Inspect(big, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mp, err := in.Plan(r.RecommendedBudget)
	if err != nil {
		t.Fatal(err)
	}
	if streams := mp.StreamedParts > 0; r.TrunkStreams != streams || streams == strings.Contains(advice, "compress: not needed") {
		t.Errorf("%d trunk parts stream at %s, the report says %v:\n%s", mp.StreamedParts, human(r.RecommendedBudget), r.TrunkStreams, advice)
	}
}
