package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/model"
)

type synthSummary struct {
	Dir         string   `json:"dir"`
	Profile     string   `json:"profile"`
	Seed        uint64   `json:"seed"`
	Files       []string `json:"files"`
	Shards      int      `json:"shards"`
	Bytes       int64    `json:"bytes"`
	Tensors     int      `json:"tensors"`
	ExpertBytes int64    `json:"expert_bytes"`
	MBps        float64  `json:"mb_per_s"`
}

func synthJSON(t *testing.T, args ...string) synthSummary {
	t.Helper()
	code, out, stderr := runCmd(t, append([]string{"synth", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("k3 synth %v: exit %d: %s", args, code, stderr)
	}
	if stderr != "" {
		t.Errorf("k3 synth wrote to a non-terminal stderr: %q", stderr)
	}
	var s synthSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("summary is not one JSON object: %v\n%s", err, out)
	}
	return s
}

// TestSynthTinyGenerate writes the tiny profile and generates from it in
// both modes.
func TestSynthTinyGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	s := synthJSON(t, "--profile", "tiny", "--out", dir)
	if s.Profile != "tiny" || s.Dir != dir || s.Shards != 1 || s.Tensors != 916 || s.Bytes <= 0 || s.ExpertBytes != 6528 {
		t.Errorf("summary %+v", s)
	}
	if !slices.Contains(s.Files, "config.json") || !slices.Contains(s.Files, "model.safetensors.index.json") {
		t.Errorf("files %v", s.Files)
	}
	var gen [2][]int
	for i, mode := range []string{"incremental", "full"} {
		code, out, stderr := runCmd(t, "generate", "--model", dir, "--ids", "3,200,17,45,99,128,250,7,64,33,180,12,91,240,5,77",
			"--max-tokens", "6", "--json", "--mode", mode)
		if code != 0 {
			t.Fatalf("generate %s: exit %d: %s", mode, code, stderr)
		}
		var g struct {
			GeneratedIDs []int `json:"generated_ids"`
		}
		if err := json.Unmarshal([]byte(out), &g); err != nil {
			t.Fatal(err)
		}
		gen[i] = g.GeneratedIDs
	}
	if len(gen[0]) != 6 || !slices.Equal(gen[0], gen[1]) {
		t.Errorf("incremental %v, full %v", gen[0], gen[1])
	}
	// The one-line summary.
	code, out, _ := runCmd(t, "synth", "--profile", "tiny", "--out", filepath.Join(t.TempDir(), "x"), "--buffered")
	if code != 0 || !strings.HasPrefix(out, "wrote ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "(buffered)") {
		t.Errorf("summary line %q (exit %d)", out, code)
	}
}

// TestSynthCustom: the custom flags reach config.json and the layout.
func TestSynthCustom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "custom")
	s := synthJSON(t, "--profile", "custom", "--out", dir, "--layers", "5", "--experts", "4", "--topk", "3",
		"--vocab", "512", "--seed", "9", "--shard-size", "256KiB")
	if s.Profile != "custom" || s.Seed != 9 || s.Shards < 3 {
		t.Errorf("summary %+v", s)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if c.Layers != 5 || !slices.Equal(c.FullAttnLayers, []int{4, 5}) || c.Experts != 4 || c.TopK != 3 || c.Vocab != 512 || c.Hidden != 128 {
		t.Errorf("config %+v", c)
	}
	var meta struct {
		Synth struct {
			Profile string `json:"profile"`
			Seed    uint64 `json:"seed"`
		} `json:"k3_synthetic"`
	}
	json.Unmarshal(raw, &meta)
	if meta.Synth.Profile != "custom" || meta.Synth.Seed != 9 {
		t.Errorf("k3_synthetic %+v", meta.Synth)
	}
	code, _, stderr := runCmd(t, "generate", "--model", dir, "--ids", "1,500,3", "--max-tokens", "2")
	if code != 0 {
		t.Errorf("generate on the custom checkpoint: exit %d: %s", code, stderr)
	}
	// Overriding a preset directly makes it custom too.
	code, out, _ := runCmd(t, "synth", "--profile", "medium", "--layers", "2", "--experts", "16", "--dry-run")
	if code != 0 || !strings.Contains(out, "profile custom") || !strings.Contains(out, "17547264 bytes per expert") {
		t.Errorf("medium dry run: exit %d\n%s", code, out)
	}
}

func TestSynthErrors(t *testing.T) {
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "keep.txt"), []byte("x"), 0o644)
	out := func() string { return filepath.Join(t.TempDir(), "o") }
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"synth", "--out", out()}, cli.ExitUsage},
		{[]string{"synth", "--profile", "huge", "--out", out()}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--topk", "9"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--layers", "1"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--layers", "0"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--moe-intermediate", "40"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--shard-size", "lots"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--base", "medium"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "custom", "--base", "huge", "--out", out()}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "extra"}, cli.ExitUsage},
		{[]string{"synth", "--profile", "tiny", "--out", full}, cli.ExitFailure},
		{[]string{"synth", "--profile", "tiny", "--out", out(), "--tokenizer", t.TempDir()}, cli.ExitIO},
		{[]string{"synth", "--profile", "medium", "--dry-run"}, cli.ExitOK},
		{[]string{"synth", "--help"}, cli.ExitOK},
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
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("the non-empty directory was changed: %d entries", len(ents))
	}
}

func TestSynthParseSize(t *testing.T) {
	for s, want := range map[string]int64{"4GiB": 4 << 30, "512MB": 512e6, "1048576": 1 << 20, "1.5 GiB": 3 << 29, "64kib": 64 << 10} {
		if got, err := synthParseSize(s); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GB", "-1GB", "0", "12XB", "1e400"} {
		if _, err := synthParseSize(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// TestSynthProfilesOneList: the help, the command list, the errors and the
// README name the same profiles, those of package synth plus custom.
func TestSynthProfilesOneList(t *testing.T) {
	want := append(synth.ProfileNames(), "custom")
	if len(want) < 5 {
		t.Fatalf("profiles %v", want)
	}
	_, help, _ := runCmd(t, "help", "synth")
	_, list, _ := runCmd(t, "help")
	_, _, unknown := runCmd(t, "synth", "--profile", "huge", "--out", t.TempDir())
	_, _, missing := runCmd(t, "synth", "--out", t.TempDir())
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{
		"k3 help synth's usage line": strings.Join(want, "|"),
		"k3 help synth's --profile":  strings.Join(want[:len(want)-1], ", ") + " or custom",
		"k3 help":                    "synthetic checkpoint (" + strings.Join(want[:len(want)-1], ", ") + " or custom)",
		"an unknown profile's error": strings.Join(want[:len(want)-1], ", ") + " or custom",
		"a missing profile's error":  strings.Join(want[:len(want)-1], ", ") + " or custom",
		"README.md":                  "--profile " + strings.Join(want, `\|`),
	} {
		in := map[string]string{"k3 help synth's usage line": help, "k3 help synth's --profile": help, "k3 help": list,
			"an unknown profile's error": unknown, "a missing profile's error": missing, "README.md": string(readme)}[where]
		if !strings.Contains(in, text) {
			t.Errorf("%s does not list the profiles as %q", where, text)
		}
	}
	for _, name := range want[:len(want)-1] {
		if !strings.Contains(help, "\n  "+name+" ") {
			t.Errorf("k3 help synth does not describe %s", name)
		}
	}
}
