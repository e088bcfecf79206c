package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchProbeSmallCheckpoint: a checkpoint whose files are all smaller
// than one probe read gets a temporary file of its own, removed afterwards;
// --probe 0 leaves the device and the I/O roofline out instead of printing
// zeros.
func TestBenchProbeSmallCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	synthJSON(t, "--profile", "tiny", "--out", dir)
	before, _ := os.ReadDir(dir)

	code, out, stderr := runCmd(t, "bench", "--model", dir, "--probe", "32MiB", "--tokens", "2", "--prompt-len", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if g, _ := r["device_gbps"].(float64); g <= 0 {
		t.Errorf("device_gbps %v, want > 0 (%s)", r["device_gbps"], stderr)
	}
	if note, _ := r["device_note"].(string); !strings.Contains(note, "temporary") {
		t.Errorf("device_note %q does not say a temporary file was read", note)
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Errorf("the probe left files behind: %d entries, had %d", len(after), len(before))
	}

	code, out, stderr = runCmd(t, "bench", "--model", dir, "--probe", "0", "--tokens", "2", "--prompt-len", "4")
	if code != 0 {
		t.Fatalf("--probe 0: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "device unmeasured") || !strings.Contains(out, "I/O unmeasured") || strings.Contains(out, "0.00 GB/s device") {
		t.Errorf("--probe 0 output does not say the device is unmeasured:\n%s", out)
	}
	code, out, _ = runCmd(t, "bench", "--model", dir, "--probe", "0", "--tokens", "2", "--prompt-len", "4", "--json")
	if code != 0 || strings.Contains(out, `"device_gbps"`) || strings.Contains(out, `"roofline_s_per_token"`) {
		t.Errorf("--probe 0 --json reports a device or I/O roofline: %s", out)
	}
}
