package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestGenerateSpec runs both oracles through k3 generate --spec 4, alone
// and with --batch-file (speculating sequences sharing passes): the ids are
// the oracle's greedy continuation.
func TestGenerateSpec(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		dir, exp := loadOracle(t, name)
		want := joinIDs(exp.FullIDs[len(exp.PromptIDs):])
		n := strconv.Itoa(len(exp.FullIDs) - len(exp.PromptIDs))
		code, out, stderr := runCmd(t, "generate", "--model", dir, "--ids", joinIDs(exp.PromptIDs), "--max-tokens", n, "--spec", "4", "--json", "--stats")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		var got struct {
			GeneratedIDs []int `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if joinIDs(got.GeneratedIDs) != want {
			t.Fatalf("%s --spec 4: %v, oracle %s", name, got.GeneratedIDs, want)
		}
		bf := filepath.Join(t.TempDir(), "prompts")
		os.WriteFile(bf, []byte(joinIDs(exp.PromptIDs)+"\n1,2,3\n"+joinIDs(exp.PromptIDs)+"\n"), 0o644)
		code, out, stderr = runCmd(t, "generate", "--model", dir, "--batch-file", bf, "--max-tokens", n, "--spec", "4", "--json")
		if code != 0 {
			t.Fatalf("%s batch: exit %d: %s", name, code, stderr)
		}
		var res struct {
			Results []struct {
				GeneratedIDs []int `json:"generated_ids"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Results) != 3 || joinIDs(res.Results[0].GeneratedIDs) != want || joinIDs(res.Results[2].GeneratedIDs) != want {
			t.Fatalf("%s batch --spec 4: %+v, oracle %s", name, res.Results, want)
		}
	}
	if code, _, _ := runCmd(t, "generate", "--model", fixtures.Path(t, "oracle/tiny-f32"), "--ids", "1,2", "--spec", "-1"); code != 2 {
		t.Fatalf("--spec -1: exit %d, want 2", code)
	}
}

// TestBenchSpec runs k3 bench --spec on a tiny checkpoint with the ceiling
// drafter: every run exact, fewer passes than tokens.
func TestBenchSpec(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if code, _, stderr := runCmd(t, "synth", "--out", dir, "--profile", "tiny"); code != 0 {
		t.Fatal(stderr)
	}
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
