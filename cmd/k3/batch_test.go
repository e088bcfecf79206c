package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

type batchOut struct {
	Results []struct {
		PromptIDs    []int `json:"prompt_ids"`
		GeneratedIDs []int `json:"generated_ids"`
	} `json:"results"`
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGenerateBatchFileOracles: both oracles' prompts, decoded in one batch
// with prompts of other lengths, give the oracle's greedy continuation; the
// other prompts give what they give alone.
func TestGenerateBatchFileOracles(t *testing.T) {
	var exps []expected
	var dirs []string
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		dir, exp := loadOracle(t, name)
		if len(exp.FullIDs)-len(exp.PromptIDs) != 20 {
			t.Fatalf("%s: oracle continues for %d tokens, the test expects 20", name, len(exp.FullIDs)-len(exp.PromptIDs))
		}
		exps, dirs = append(exps, exp), append(dirs, dir)
	}
	long := make([]int, 37)
	for i := range long {
		long[i] = (i*53 + 11) % 250
	}
	others := [][]int{{5}, {9, 8, 7}, long}
	file := "# oracle prompts among others\n" + joinIDs(exps[0].PromptIDs) + "\n\n" + joinIDs(others[0]) + "\n" +
		joinIDs(others[1]) + "\n  " + strings.ReplaceAll(joinIDs(exps[1].PromptIDs), ",", ", ") + "  \n# long\n" + joinIDs(others[2]) + "\n"
	path := writeFile(t, file)
	prompts := [][]int{exps[0].PromptIDs, others[0], others[1], exps[1].PromptIDs, others[2]}

	for k, dir := range dirs {
		exp := exps[k]
		code, out, stderr := runCmd(t, "generate", "--model", dir, "--batch-file", path, "--max-tokens", "20", "--temperature", "0", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", dir, code, stderr)
		}
		var got batchOut
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, out)
		}
		if len(got.Results) != len(prompts) {
			t.Fatalf("%d results, want %d", len(got.Results), len(prompts))
		}
		for i, r := range got.Results {
			if joinIDs(r.PromptIDs) != joinIDs(prompts[i]) {
				t.Errorf("result %d: prompt %v, want %v (file order)", i, r.PromptIDs, prompts[i])
			}
		}
		want := joinIDs(exp.FullIDs[len(exp.PromptIDs):])
		for _, i := range []int{0, 3} {
			if g := joinIDs(got.Results[i].GeneratedIDs); g != want {
				t.Errorf("%s: oracle prompt %d in a batch generated %s, want %s", filepath.Base(dir), i, g, want)
			}
		}
		// Again with the weights streamed: a budget just above the floor.
		if floor := budgetFloor(t, dir, path); floor > 0 {
			budget := strconv.FormatInt(floor+1<<20, 10)
			code, out, stderr := runCmd(t, "generate", "--model", dir, "--batch-file", path, "--max-tokens", "20", "--json", "--stats", "--budget", budget)
			if code != 0 {
				t.Fatalf("budget %s: exit %d: %s", budget, code, stderr)
			}
			var st struct {
				batchOut
				Stats struct {
					BytesRead int64 `json:"bytes_read"`
				} `json:"stats"`
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatal(err)
			}
			if st.Stats.BytesRead == 0 {
				t.Errorf("budget %s: nothing streamed", budget)
			}
			for _, i := range []int{0, 3} {
				if g := joinIDs(st.Results[i].GeneratedIDs); g != want {
					t.Errorf("%s at %s: oracle prompt %d generated %s, want %s", filepath.Base(dir), budget, i, g, want)
				}
			}
		}
		// Every prompt equals its solo run; the plain output is one line per prompt.
		code, plain, stderr := runCmd(t, "generate", "--model", dir, "--batch-file", path, "--max-tokens", "20", "--sessions", "2")
		if code != 0 {
			t.Fatalf("plain: exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimSuffix(plain, "\n"), "\n")
		if len(lines) != len(prompts) {
			t.Fatalf("plain output has %d lines, want %d:\n%s", len(lines), len(prompts), plain)
		}
		for i, p := range prompts {
			code, solo, stderr := runCmd(t, "generate", "--model", dir, "--ids", joinIDs(p), "--max-tokens", "20", "--json")
			if code != 0 {
				t.Fatalf("solo: exit %d: %s", code, stderr)
			}
			var s struct {
				GeneratedIDs []int `json:"generated_ids"`
			}
			if err := json.Unmarshal([]byte(solo), &s); err != nil {
				t.Fatal(err)
			}
			if g, w := joinIDs(got.Results[i].GeneratedIDs), joinIDs(s.GeneratedIDs); g != w {
				t.Errorf("prompt %d: batch %s, solo %s", i, g, w)
			}
			if lines[i] != joinIDs(s.GeneratedIDs) {
				t.Errorf("plain line %d: %q, want %q", i, lines[i], joinIDs(s.GeneratedIDs))
			}
		}
	}
}

// budgetFloor reads the floor of a batch run from the ErrBudget message of
// a 1-byte budget, or returns 0 (and logs) if the message has no figure.
func budgetFloor(t *testing.T, dir, path string) int64 {
	t.Helper()
	code, _, stderr := runCmd(t, "generate", "--model", dir, "--batch-file", path, "--max-tokens", "20", "--budget", "1")
	const mark = "the floor needs "
	i := strings.Index(stderr, mark)
	if code != cli.ExitBudget || i < 0 {
		t.Logf("no floor in %q (exit %d); skipping the streamed run", stderr, code)
		return 0
	}
	f := strings.Fields(stderr[i+len(mark):])
	if len(f) < 2 {
		return 0
	}
	n, err := cli.ParseSize(f[0] + f[1])
	if err != nil {
		t.Logf("floor %q: %v", f[0]+f[1], err)
		return 0
	}
	return n
}

// TestGenerateBatchFileErrors: a malformed file is a usage error naming the
// line; so is a token outside the vocabulary.
func TestGenerateBatchFileErrors(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	cases := []struct {
		text string
		args []string
		code int
		want string
	}{
		{"1,2,3\n# fine\n4,x,6\n", nil, cli.ExitUsage, "line 3: bad token id \"x\""},
		{"1,2\n\n1,-4\n", nil, cli.ExitUsage, "line 3"},
		{"# nothing\n\n", nil, cli.ExitUsage, "no prompts"},
		{"1,2\n3,9999\n", nil, cli.ExitUsage, "line 2"},
		{"1,2\n", []string{"--ids", "1"}, cli.ExitUsage, "not both"},
		{"1,2\n", []string{"--sessions", "-1"}, cli.ExitUsage, "negative"},
	}
	for _, c := range cases {
		path := writeFile(t, c.text)
		args := append([]string{"generate", "--model", dir, "--batch-file", path}, c.args...)
		code, _, stderr := runCmd(t, args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%q %v: exit %d, stderr %q; want exit %d and %q", c.text, c.args, code, stderr, c.code, c.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%q: error is not one line: %q", c.text, stderr)
		}
	}
	code, _, stderr := runCmd(t, "generate", "--model", dir, "--batch-file", filepath.Join(t.TempDir(), "absent"))
	if code != cli.ExitUsage || !strings.Contains(stderr, "--batch-file") {
		t.Errorf("absent file: exit %d (%s), want %d naming --batch-file", code, stderr, cli.ExitUsage)
	}
	// A prompt that fails while decoding (its context is full) fails the
	// command, naming its line.
	path := writeFile(t, "1,2\n"+joinIDs(make([]int, 30))+"\n")
	code, _, stderr = runCmd(t, "generate", "--model", dir, "--batch-file", path, "--max-context", "32", "--max-tokens", "8")
	if code != cli.ExitUsage || !strings.Contains(stderr, "line 2") || !strings.Contains(stderr, "MaxContext") {
		t.Errorf("full context: exit %d, stderr %q", code, stderr)
	}
}
