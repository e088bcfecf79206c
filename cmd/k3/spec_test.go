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
