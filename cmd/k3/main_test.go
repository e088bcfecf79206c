package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(testStdin), &out, &errb)
	return code, out.String(), errb.String()
}

type expected struct {
	PromptIDs  []int       `json:"prompt_ids"`
	FullIDs    []int       `json:"full_ids"`
	TFPred     []int       `json:"tf_pred"`
	LogitsHead [][]float64 `json:"logits_head"`
	LastLogits []float64   `json:"last_logits"`
}

func joinIDs(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

func TestGenerateAndLogitsJSON(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		dir, exp := loadOracle(t, name)
		n := len(exp.FullIDs) - len(exp.PromptIDs)
		for _, mode := range []string{"full", "incremental"} {
			code, out, stderr := runCmd(t, "generate", "--model", dir, "--ids", joinIDs(exp.PromptIDs),
				"--max-tokens", strconv.Itoa(n), "--temperature", "0", "--json", "--mode", mode)
			if code != 0 {
				t.Fatalf("%s %s: exit %d: %s", name, mode, code, stderr)
			}
			var got struct {
				PromptIDs    []int `json:"prompt_ids"`
				GeneratedIDs []int `json:"generated_ids"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%s: output is not one JSON object: %v\n%s", name, err, out)
			}
			if joinIDs(got.GeneratedIDs) != joinIDs(exp.FullIDs[len(exp.PromptIDs):]) || joinIDs(got.PromptIDs) != joinIDs(exp.PromptIDs) {
				t.Errorf("%s %s: generated %v, want %v", name, mode, got.GeneratedIDs, exp.FullIDs[len(exp.PromptIDs):])
			}

			code, out, stderr = runCmd(t, "logits", "--model", dir, "--ids", joinIDs(exp.FullIDs), "--json", "--mode", mode)
			if code != 0 {
				t.Fatalf("logits %s: exit %d: %s", mode, code, stderr)
			}
			var lg struct {
				Positions []struct {
					Argmax     int       `json:"argmax"`
					LogitsHead []float64 `json:"logits_head"`
				} `json:"positions"`
				LastLogits []float64 `json:"last_logits"`
			}
			if err := json.Unmarshal([]byte(out), &lg); err != nil {
				t.Fatal(err)
			}
			if len(lg.Positions) != len(exp.FullIDs) || len(lg.LastLogits) != len(exp.LastLogits) {
				t.Fatalf("logits %s: %d positions, %d last logits", mode, len(lg.Positions), len(lg.LastLogits))
			}
			for i := len(exp.PromptIDs) - 1; i < len(exp.FullIDs)-1; i++ {
				if lg.Positions[i].Argmax != exp.TFPred[i] {
					t.Errorf("logits %s position %d: argmax %d, want %d", mode, i, lg.Positions[i].Argmax, exp.TFPred[i])
				}
				for j, w := range exp.LogitsHead[i] {
					if math.Abs(lg.Positions[i].LogitsHead[j]-w) > 1e-4 {
						t.Errorf("logits %s position %d head %d: %v, want %v", mode, i, j, lg.Positions[i].LogitsHead[j], w)
					}
				}
			}
			for j, w := range exp.LastLogits {
				if math.Abs(lg.LastLogits[j]-w) > 1e-4 {
					t.Fatalf("last logit %d: %v, want %v", j, lg.LastLogits[j], w)
				}
			}
		}
	}
}

func TestExitCodes(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"generate", "--model", dir, "--ids", "1,999"}, cli.ExitUsage},
		{[]string{"generate", "--model", dir, "--ids", "x"}, cli.ExitUsage},
		{[]string{"generate", "--model", dir}, cli.ExitUsage},
		{[]string{"generate", "--ids", "1"}, cli.ExitUsage},
		{[]string{"generate", "--model", dir, "--ids", "1", "--mode", "sideways"}, cli.ExitUsage},
		{[]string{"generate", "--bogus"}, cli.ExitUsage},
		{[]string{"logits", "--model", t.TempDir(), "--ids", "1"}, cli.ExitCheckpoint},
		{[]string{"frobnicate"}, cli.ExitUsage},
		{[]string{"help"}, cli.ExitOK},
		{[]string{"generate", "--help"}, cli.ExitOK},
		// The benchmarks are wired in (internal/app/bench tests them).
		{[]string{"bench", "--help"}, cli.ExitOK},
		{[]string{"bench", "--model", dir, "--batch", "0"}, cli.ExitUsage},
		{[]string{"bench-serve", "--model", dir, "--clients", "0"}, cli.ExitUsage},
		{[]string{"--version"}, cli.ExitOK},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(t, c.args...)
		if code != c.code {
			t.Errorf("k3 %v: exit %d, want %d (%s)", c.args, code, c.code, stderr)
		}
		if code != cli.ExitOK && strings.Count(strings.TrimSpace(stderr), "\n") > 0 && !strings.Contains(stderr, "Usage") {
			t.Errorf("k3 %v: error is not one line: %q", c.args, stderr)
		}
	}
}

// loadOracle returns an oracle checkpoint's directory and expected.json.
func loadOracle(t *testing.T, name string) (string, expected) {
	t.Helper()
	dir := fixtures.Path(t, "oracle/"+name)
	raw, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp expected
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	return dir, exp
}

// TestCrashIsNotAUsageError: a panic in a command exits 7 with "internal
// error" and the stack, never 2 (a usage error); an unreadable config.json
// (EACCES, EIO) is an I/O error (6), not a bad checkpoint (3).
func TestCrashIsNotAUsageError(t *testing.T) {
	commands = append(commands, command{name: "crash-for-test", run: func([]string, io.Reader, io.Writer, io.Writer) error {
		var s []int
		_ = s[len(os.Args)+1] // an index out of range: a runtime panic
		return nil
	}})
	defer func() { commands = commands[:len(commands)-1] }()
	code, _, stderr := runCmd(t, "crash-for-test")
	if code != cli.ExitInternal || !strings.Contains(stderr, "internal error") || !strings.Contains(stderr, "goroutine") {
		t.Fatalf("exit %d, want %d with the stack: %s", code, cli.ExitInternal, stderr)
	}
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EIO} {
		err := fmt.Errorf("k3: reading config: %w", &fs.PathError{Op: "open", Path: "config.json", Err: errno})
		if got := cli.ExitCode(err); got != cli.ExitIO {
			t.Errorf("%v: exit %d, want %d", errno, got, cli.ExitIO)
		}
	}
}
