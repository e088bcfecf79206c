package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
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
