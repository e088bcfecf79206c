package bench

import (
	"encoding/json"
	"testing"
)

// TestBenchSpec runs k3 bench --spec on a tiny checkpoint with the ceiling
// drafter: every run exact, fewer passes than tokens.
func TestBenchSpec(t *testing.T) {
	dir := tiny(t)
	code, out, stderr := runCmd(t, "bench", "--model", dir, "--spec", "1,4", "--drafter", "ceiling", "--tokens", "12", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r struct {
		Spec []struct {
			K              int     `json:"k"`
			PassesPerToken float64 `json:"passes_per_token"`
			Accepted       float64 `json:"accepted_per_pass"`
			Exact          bool    `json:"exact"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Spec) != 3 || r.Spec[0].K != 0 || r.Spec[0].PassesPerToken != 1 {
		t.Fatalf("rows %+v", r.Spec)
	}
	for _, row := range r.Spec[1:] {
		if !row.Exact || row.PassesPerToken >= 1 || row.Accepted < 0.5 {
			t.Fatalf("k=%d with right drafts: %+v", row.K, row)
		}
	}
	if code, _, _ := runCmd(t, "bench", "--model", dir, "--spec", "2", "--drafter", "oracle"); code != 2 {
		t.Fatalf("--drafter oracle: exit %d, want 2", code)
	}
}
