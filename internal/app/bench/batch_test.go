package bench

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
)

// TestBenchBatch: k3 bench --batch 1,2 --json measures both sizes on a tiny
// synthetic checkpoint, and --check proves every sequence equals its solo
// run.
func TestBenchBatch(t *testing.T) {
	dir := tiny(t)
	code, out, stderr := runCmd(t, "bench", "--model", dir, "--batch", "1,2", "--tokens", "4", "--prompt-len", "8", "--check", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r struct {
		Sessions int `json:"sessions"`
		MaxBatch int `json:"max_batch"`
		Batches  []struct {
			Batch               int     `json:"batch"`
			DecodeTokensPerS    float64 `json:"decode_tokens_per_s"`
			DecodeSPerToken     float64 `json:"decode_s_per_token"`
			BytesReadPerToken   int64   `json:"bytes_read_per_token"`
			TrunkBytesPerToken  int64   `json:"trunk_bytes_per_token"`
			ExpertUnionPerLayer float64 `json:"expert_union_per_layer"`
			Passes              int64   `json:"passes"`
			RowsPerPass         float64 `json:"rows_per_pass"`
			PeakRSSBytes        int64   `json:"peak_rss_bytes"`
			GeneratedTokens     int     `json:"generated_tokens"`
			Checked             bool    `json:"checked"`
		} `json:"batches"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if len(r.Batches) != 2 || r.Sessions != 2 || r.MaxBatch != 66 {
		t.Fatalf("%d batches, %d sessions, %d rows per pass:\n%s", len(r.Batches), r.Sessions, r.MaxBatch, out)
	}
	for i, b := range r.Batches {
		if b.Batch != i+1 || b.DecodeTokensPerS <= 0 || b.DecodeSPerToken <= 0 || b.PeakRSSBytes <= 0 ||
			b.GeneratedTokens != 4*b.Batch || !b.Checked {
			t.Errorf("batch entry %d: %+v", i, b)
		}
		// Zero until the library counts passes; consistent once it does.
		if b.BytesReadPerToken < 0 || b.TrunkBytesPerToken < 0 || b.ExpertUnionPerLayer < 0 || b.Passes < 0 ||
			(b.Passes > 0) != (b.RowsPerPass > 0) {
			t.Errorf("batch entry %d: %+v", i, b)
		}
	}
	// The table.
	code, out, stderr = runCmd(t, "bench", "--model", dir, "--batch", "2", "--tokens", "2", "--prompt-len", "4")
	if code != 0 || !strings.Contains(out, "rows/pass") || strings.Count(out, "\n") != 4 {
		t.Errorf("table: exit %d (%s):\n%s", code, stderr, out)
	}
	// Without --batch, the single-run bench is unchanged.
	code, out, stderr = runCmd(t, "bench", "--model", dir, "--probe-size", "0", "--tokens", "2", "--prompt-len", "4", "--json")
	if code != 0 || !strings.Contains(out, `"decode_vs_bound"`) || strings.Contains(out, `"batches"`) {
		t.Errorf("single bench: exit %d (%s):\n%s", code, stderr, out)
	}
	for _, args := range [][]string{{"--batch", "1,0"}, {"--batch", "x"}, {"--check"}, {"--batch", "1", "--max-batch", "-1"}} {
		code, _, stderr := runCmd(t, append([]string{"bench", "--model", dir}, args...)...)
		if code != cli.ExitUsage {
			t.Errorf("bench %v: exit %d (%s), want %d", args, code, stderr, cli.ExitUsage)
		}
	}
}
