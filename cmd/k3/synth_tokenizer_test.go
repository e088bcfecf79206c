package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/tokenizer"
)

// TestSynthWithTokenizer: --with-tokenizer and the quickstart profile write
// a generated tokenizer that fits the vocabulary.
func TestSynthWithTokenizer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	s := synthJSON(t, "--profile", "tiny", "--vocab", "300", "--with-tokenizer", "--out", dir)
	if !slices.Contains(s.Files, "tiktoken.model") || !slices.Contains(s.Files, "tokenizer_config.json") {
		t.Fatalf("files %v", s.Files)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil || tok.VocabSize() != 300 {
		t.Fatalf("tokenizer: %v", err)
	}
	qs := filepath.Join(t.TempDir(), "q")
	s = synthJSON(t, "--profile", "quickstart", "--out", qs)
	if s.Profile != "quickstart" || !slices.Contains(s.Files, "tiktoken.model") || !slices.Contains(s.Files, "generation_config.json") {
		t.Errorf("quickstart summary %+v", s)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "tiktoken.model"), []byte("IQ== 0\n"), 0o644)
	for _, args := range [][]string{
		{"synth", "--profile", "tiny", "--with-tokenizer", "--out", filepath.Join(t.TempDir(), "x")},                   // 256 ids are too few
		{"synth", "--profile", "quickstart", "--vocab", "200", "--out", filepath.Join(t.TempDir(), "x")},               // so are 200
		{"synth", "--profile", "tiny", "--vocab", "300", "--with-tokenizer", "--tokenizer", src, "--out", t.TempDir()}, // one or the other
		{"synth", "--profile", "quickstart", "--tokenizer", src, "--out", filepath.Join(t.TempDir(), "x")},             // quickstart has its own
	} {
		if code, _, _ := runCmd(t, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
}
