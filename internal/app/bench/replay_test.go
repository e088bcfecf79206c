package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/testmodel"
	"github.com/k3go/k3/tokenizer"
)

// writeTranscripts writes two small transcripts in the agent-traces schema
// whose assistant turns repeat what came before (a command run again, a
// file quoted back), so that drafts are right.
func writeTranscripts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := `{"command": "grep -rn \"def parse\" src/ | head -20"}`
	file := "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n"
	for i, name := range []string{"a.json", "b.json"} {
		tr := map[string]any{"source": "test", "turns": []map[string]any{
			{"role": "system", "text": "You are a coding agent."},
			{"role": "user", "text": fmt.Sprintf("Fix the parser (task %d).", i)},
			{"role": "assistant", "text": "Let me look.", "content": "Let me look.", "tool_calls": []map[string]any{{"name": "bash", "arguments": cmd}}},
			{"role": "tool", "text": file, "tool_call_id": "c1"},
			{"role": "assistant", "text": "The file is:\n" + file + "I will run it again.", "content": "The file is:\n" + file + "I will run it again.",
				"tool_calls": []map[string]any{{"name": "bash", "arguments": cmd}}},
		}}
		b, _ := json.Marshal(tr)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBenchReplay replays transcripts on the quickstart checkpoint: both
// runs produce every turn exactly, the speculating one with fewer passes
// than tokens (the turns repeat their context), and the JSON has the
// shape the issue asks for; the projection on the same checkpoint at its
// floor (its trunk streams) decodes the same turns faster with drafts.
func TestBenchReplay(t *testing.T) {
	model := testmodel.Dir(t)
	traces := writeTranscripts(t)
	// The projection on medium's shape, headers only, at a budget where
	// its trunk streams.
	medium := filepath.Join(t.TempDir(), "medium")
	if _, err := synth.WriteSparse(medium, synth.Medium(), 0); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCmd(t, "bench", "--replay", traces, "--model", model, "--spec", "4",
		"--project", medium, "--project-budget", "2.6GB", "--project-batch", "1,2", "--gbps", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Replay *struct {
			Plain, Spec struct {
				SPerToken     float64 `json:"s_per_token"`
				TokensPerPass float64 `json:"tokens_per_pass"`
				RowsPerPass   float64 `json:"rows_per_pass"`
				BytesPerToken float64 `json:"bytes_per_token"`
				Tokens        int     `json:"tokens"`
				Accepted      int     `json:"accepted"`
			}
			Speedup float64 `json:"speedup"`
			Exact   bool    `json:"exact"`
		} `json:"replay"`
		Projection []struct {
			Batch       int `json:"batch"`
			Fits        bool
			Plain, Spec struct {
				SPerToken     float64 `json:"s_per_token"`
				TokensPerPass float64 `json:"tokens_per_pass"`
			}
			Speedup float64 `json:"speedup"`
		} `json:"projection"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := rep.Replay
	if r == nil || !r.Exact || r.Plain.Tokens == 0 || r.Plain.Tokens != r.Spec.Tokens {
		t.Fatalf("replay %+v", r)
	}
	if r.Plain.TokensPerPass != 1 || r.Spec.TokensPerPass <= 1.2 || r.Spec.RowsPerPass <= 1 || r.Spec.Accepted == 0 {
		t.Fatalf("a fixed draft length of 4 on turns that repeat their context: plain %+v, spec %+v", r.Plain, r.Spec)
	}
	if r.Speedup <= 0 || r.Plain.SPerToken <= 0 || r.Spec.SPerToken <= 0 {
		t.Fatalf("speedup %v", r.Speedup)
	}
	if len(rep.Projection) != 2 {
		t.Fatalf("projection %+v", rep.Projection)
	}
	for _, p := range rep.Projection {
		if !p.Fits || p.Spec.TokensPerPass <= 1 || p.Speedup <= 1 {
			t.Fatalf("projection at batch %d: %+v", p.Batch, p)
		}
	}
	// Bad flags.
	for _, args := range [][]string{
		{"--replay", traces},
		{"--replay", traces, "--model", model, "--subset", "half"},
		{"--replay", traces, "--model", model, "--spec", "x"},
		{"--replay", traces, "--model", model, "--turns", "-1"},
	} {
		if code, _, _ := runCmd(t, append([]string{"bench"}, args...)...); code != 2 {
			t.Errorf("%s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

// TestLoadTranscripts: every assistant turn is found, its tokens are the
// reply rendered in K3's format (reasoning, content, the tool call's
// arguments), and the prompt before it holds the earlier turns.
func TestLoadTranscripts(t *testing.T) {
	tok, err := tokenizer.Load(testmodel.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	trs, err := loadTranscripts(writeTranscripts(t), tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != 2 || trs[0].name != "a" || len(trs[0].turns) != 2 {
		t.Fatalf("%d transcripts, first %q with %d turns", len(trs), trs[0].name, len(trs[0].turns))
	}
	tr := trs[1]
	second := tok.DecodeLenient(tr.ids[tr.turns[1][0]:tr.turns[1][1]])
	prompt := tok.DecodeLenient(tr.ids[:tr.turns[1][0]])
	if !strings.Contains(second, "I will run it again.") || !strings.Contains(second, `grep -rn`) || strings.Contains(second, "task 1") {
		t.Fatalf("second turn %q", second)
	}
	if !strings.Contains(prompt, "Fix the parser (task 1).") || !strings.Contains(prompt, "Let me look.") || !strings.HasSuffix(prompt, "message role=\"assistant\"<|sep|>") {
		t.Fatalf("second turn's prompt %q", prompt)
	}
	// Folding into a smaller vocabulary keeps equal tokens equal.
	a := append([]int(nil), trs[0].ids...)
	distinct, folded := remap(trs, 1<<20)
	if folded != 0 || distinct == 0 {
		t.Fatalf("remap: %d distinct, %d folded", distinct, folded)
	}
	for i := range a {
		for j := range a[:i] {
			if (a[i] == a[j]) != (trs[0].ids[i] == trs[0].ids[j]) {
				t.Fatalf("remap changed equality at %d, %d", i, j)
			}
		}
	}
}
