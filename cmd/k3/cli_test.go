package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestErrorMessages: each failure is one line that names the command once,
// speaks of flags (not library fields), and exits with the right code.
func TestErrorMessages(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	packed := t.TempDir()
	for _, name := range []string{"trunk.bin", "trunk.json"} {
		if err := os.WriteFile(filepath.Join(packed, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"generate", "--model", dir, "--ids", "1,99999"}, cli.ExitUsage, "k3 generate: token id out of range"},
		{[]string{"generate", "--bogus"}, cli.ExitUsage, "k3 generate: unknown flag --bogus (k3 help generate lists the flags)"},
		{[]string{"tokenize", "--model", t.TempDir(), "--text", "hi"}, cli.ExitUsage, "has no tokenizer"},
		{[]string{"doctor", "--dir", filepath.Join(t.TempDir(), "missing")}, cli.ExitUsage, "k3 doctor: --dir /"},
		{[]string{"pack", "--model", dir, "--out", packed}, cli.ExitUsage, "already exists (use --force to replace it)"},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(t, c.args...)
		if code != c.code {
			t.Errorf("k3 %v: exit %d, want %d (%s)", c.args, code, c.code, stderr)
		}
		if lines := strings.Count(strings.TrimRight(stderr, "\n"), "\n") + 1; lines != 1 {
			t.Errorf("k3 %v: %d lines of error, want 1: %q", c.args, lines, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("k3 %v: stderr %q does not contain %q", c.args, stderr, c.want)
		}
		if strings.Contains(stderr, ": k3: ") {
			t.Errorf("k3 %v: doubled prefix in %q", c.args, stderr)
		}
	}
}

// TestHelpShowsUsage: k3 help CMD, CMD --help and CMD -h print the usage
// and the flags on stdout (so that "k3 help run | less" shows them), with
// nothing on stderr and exit 0.
func TestHelpShowsUsage(t *testing.T) {
	for _, args := range [][]string{{"generate", "--help"}, {"generate", "-h"}, {"help", "generate"}} {
		code, stdout, stderr := runCmd(t, args...)
		if code != cli.ExitOK || !strings.Contains(stdout, "Usage: k3 generate") || !strings.Contains(stdout, "-max-tokens") || stderr != "" {
			t.Errorf("k3 %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}
