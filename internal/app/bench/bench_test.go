package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3"
)

// TestBenchProbeSmallCheckpoint: a checkpoint whose files are all smaller
// than one probe read gets a temporary file of its own, removed afterwards;
// --probe-size 0 leaves the device and the I/O roofline out instead of printing
// zeros.
func TestBenchProbeSmallCheckpoint(t *testing.T) {
	dir := tiny(t)
	before, _ := os.ReadDir(dir)

	code, out, stderr := runCmd(t, "bench", "--model", dir, "--probe-size", "32MiB", "--tokens", "2", "--prompt-len", "4", "--json")
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

	code, out, stderr = runCmd(t, "bench", "--model", dir, "--probe-size", "0", "--tokens", "2", "--prompt-len", "4")
	if code != 0 {
		t.Fatalf("--probe-size 0: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "device unmeasured") || !strings.Contains(out, "I/O unmeasured") || strings.Contains(out, "0.00 GB/s device") {
		t.Errorf("--probe-size 0 output does not say the device is unmeasured:\n%s", out)
	}
	code, out, _ = runCmd(t, "bench", "--model", dir, "--probe", "0", "--tokens", "2", "--prompt-len", "4", "--json")
	if code != 0 || strings.Contains(out, `"device_gbps"`) || strings.Contains(out, `"roofline_s_per_token"`) {
		t.Errorf("--probe 0 (the old name) --json reports a device or I/O roofline: %s", out)
	}
}

// TestBenchRounds benches a plain and a compressed pack over two rounds,
// the second in reverse order, and prints each trunk's median and its
// ratio within the rounds; --rounds without two trunks is a usage error.
func TestBenchRounds(t *testing.T) {
	dir := tiny(t)
	plain, packed := filepath.Join(t.TempDir(), "plain"), filepath.Join(t.TempDir(), "packed")
	for out, compress := range map[string]bool{plain: false, packed: true} {
		if err := k3.Pack(context.Background(), dir, out, k3.PackOptions{Compress: compress}); err != nil {
			t.Fatalf("packing %s: %v", out, err)
		}
	}
	code, out, stderr := runCmd(t, "bench", "--model", dir, "--trunk", plain+","+packed, "--rounds", "2", "--probe-size", "0", "--tokens", "2", "--prompt-len", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Round 2 runs the trunks in reverse order.
	if i, j := strings.Index(stderr, "round 2 of 2, trunk 2 of 2"), strings.Index(stderr, "round 2 of 2, trunk 1 of 2"); i < 0 || j < 0 || i > j {
		t.Errorf("round 2 did not bench the compressed pack first:\n%s", stderr)
	}
	_, summary, ok := strings.Cut(out, "over 2 rounds")
	if !ok || !strings.Contains(summary, plain) || !strings.Contains(summary, packed) || !strings.Contains(summary, "1.000×") {
		t.Errorf("no summary over 2 rounds naming both trunks:\n%s", out)
	}
	if code, _, stderr := runCmd(t, "bench", "--model", dir, "--rounds", "2", "--probe-size", "0"); code != 2 || !strings.Contains(stderr, "--rounds") {
		t.Errorf("--rounds 2 with one trunk: exit %d, %s", code, stderr)
	}
}

// TestBenchBytesAddUp: at the floor, where the trunk, the experts and the
// embedding rows all stream, k3 bench's bytes per token are the sum of its
// parts (trunk, experts, embedding rows, the direct reads' alignment), each
// of them read; the text names every part; the memory line says the peak
// is measured and the plan and floor are bounds.
func TestBenchBytesAddUp(t *testing.T) {
	dir := tiny(t)
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 4096})
	if err != nil {
		t.Fatal(err)
	}
	budget := fmt.Sprint(in.FloorBytes)
	code, out, stderr := runCmd(t, "bench", "--model", dir, "--budget", budget, "--probe-size", "0", "--tokens", "8", "--prompt-len", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.TrunkBytesPerToken <= 0 || r.ExpertBytesPerTok <= 0 || r.EmbedBytesPerToken <= 0 || r.PaddingBytesPerToken < 0 ||
		r.TrunkBytesPerToken+r.ExpertBytesPerTok+r.EmbedBytesPerToken+r.PaddingBytesPerToken != r.BytesReadPerToken {
		t.Errorf("read per token %d = trunk %d + experts %d + embedding rows %d + alignment %d?", r.BytesReadPerToken,
			r.TrunkBytesPerToken, r.ExpertBytesPerTok, r.EmbedBytesPerToken, r.PaddingBytesPerToken)
	}
	if r.PeakRSSBytes <= 0 || r.PlannedBytes <= 0 || r.FloorBytes <= 0 {
		t.Errorf("peak %d, planned %d, floor %d", r.PeakRSSBytes, r.PlannedBytes, r.FloorBytes)
	}
	var text strings.Builder
	printBench(&text, &r)
	for _, want := range []string{"embedding rows", "alignment of direct reads", "measured (the process's high-water mark)", "upper bounds"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, text.String())
		}
	}
}
