package main

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/k3go/k3/internal/app/cli"
)

// The flag walk (TestEveryFlagRefusesBadValues) knows, for the flags
// whose type does not say what a bad value is, what it is:
var (
	// zeroMeans are the numeric flags for which 0 is a setting (what it
	// means is in each flag's help); every other numeric flag must refuse
	// 0. A key is a flag's name, or "command/flag" for one command's.
	zeroMeans = map[string]bool{
		"threads": true, "max-context": true, "prefill-chunk": true, "prefix-cache-block": true,
		"max-batch": true, "spec": true, "queue": true, "concurrency": true, "stored-responses": true,
		"temperature": true, "top-k": true, "top-p": true, "min-p": true, "repetition-penalty": true,
		"presence-penalty": true, "frequency-penalty": true, "seed": true, "stop-bias": true, "close-bias": true,
		"header-tail": true, "reply-tokens": true, "rank": true, "ranks": true,
		"request-timeout": true, "shutdown-timeout": true, "peer-timeout": true, "peer-load-timeout": true,
		"net-latency": true, "files": true, "turns": true, "skip-turns": true, "turn-tokens": true, "max-prompt": true,
		"generate/max-tokens": true, "generate/sessions": true,
	}
	// negativeOK are the numeric flags a negative value is valid for.
	negativeOK = map[string]bool{"presence-penalty": true, "frequency-penalty": true}
	// badStrings are bad values of string flags that are neither input
	// paths (cli.InputFiles, cli.InputDirs: a path that does not exist is
	// bad) nor free text (anyString).
	badStrings = map[string][]string{
		"budget": {"-1", "0", "lots"}, "preset": {"bogus"}, "probe-size": {"-1", "lots", "1B"},
		"max-body": {"0", "-1", "lots"}, "prefix-cache-ram": {"-1", "lots"}, "prefix-cache-disk": {"-1", "lots"},
		"shard-size": {"0", "-1", "lots"}, "effort": {"bogus", ""}, "mode": {"bogus"}, "log-format": {"xml"},
		"compression": {"bogus"}, "drafter": {"bogus"}, "profile": {"bogus"}, "base": {"bogus"},
		"shard": {"5/4", "x", "-1/2"}, "addr": {"no-port"}, "batch": {"0", "x", "-1"}, "clients": {"0", "x"},
		"bench/spec": {"0", "x"}, "spec": {"-1", "x", "auto3"}, "gbps": {"0", "x", "-1"}, "prompts": {"-5", "x"}, "uncached-turns": {"0", "x"},
		"ids": {"-1", "x", ""}, "detokenize/ids": {"-1", "x"}, "template/ids": {"-1", "x"},
		"regex": {"a(", ""}, "stop": {""}, "prompt": {""},
		"peers": {"no-port", "a:1,,b:2"}, "listen": {"no-port"}, "cluster-key": {"short"},
		"progress": {"bogus", ""}, "plan/ranks": {"0", "x", "-1", "1,,2"},
		"subset": {"bogus", ""}, "project-budget": {"0", "x", "-1GB"}, "project-batch": {"0", "x"},
	}
	// anyString are string flags any value of which is valid (text, names,
	// and paths the command creates).
	anyString = map[string]bool{
		"system": true, "name": true, "api-key": true, "cors": true, "text": true,
		"out": true, "output": true, "cpuprofile": true, "prefix-cache-dir": true,
	}
)

// flagWalkBases are the arguments each command gets beside the flag under
// test: everything it requires, valid, and a checkpoint or tokenizer that
// fails only once every flag has been checked (an empty directory, a
// malformed tokenizer), so that a bad value accepted shows as the wrong
// error rather than as work done. A command with --model and no entry gets
// --model EMPTY; a new command without either must get an entry here.
func flagWalkBases(t *testing.T) map[string][]string {
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty")
	badTok := filepath.Join(tmp, "badtok")
	file := filepath.Join(tmp, "input.txt")
	for _, d := range []string{empty, badTok} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(badTok, "tiktoken.model"), []byte("not a tokenizer\n"), 0o644)
	os.WriteFile(filepath.Join(badTok, "tokenizer_config.json"), []byte("{}"), 0o644)
	os.WriteFile(file, []byte(`{"messages":[]}`), 0o644)
	out := func(name string) string { return filepath.Join(tmp, "out-"+name) }
	return map[string][]string{
		"run":         {"--model", empty, "--prompt", "hi"},
		"generate":    {"--model", empty, "--ids", "1"},
		"logits":      {"--model", empty, "--ids", "1"},
		"batch":       {"--model", empty, "--input", file, "--output", out("batch")},
		"pack":        {"--model", empty, "--out", out("pack")},
		"slice":       {"--model", empty, "--out", out("slice"), "--rank", "1", "--ranks", "2"},
		"tokenize":    {"--tokenizer", badTok, "--text", "hi"},
		"detokenize":  {"--tokenizer", badTok, "--ids", "1"},
		"template":    {"--tokenizer", badTok, "--input", file},
		"synth":       {"--profile", "tiny", "--out", out("synth"), "--dry-run"},
		"serve":       {"--model", empty, "--addr", "127.0.0.1:0"},
		"doctor":      {"--dir", empty, "--model", empty, "--probe-size", "1MiB"},
		"bench-serve": {"--model", empty},
		"worker":      {"--model", empty, "--listen", "127.0.0.1:0", "--cluster-key", strings.Repeat("k", 32)},
	}
}

// TestEveryFlagRefusesBadValues walks every flag of every command (each
// command's flag set, as k3 CMD --help defines it, so a new command or
// flag is walked too) with bad values for its type: not a number, out of
// range, negative, zero where zero means nothing, NaN, a path that does
// not exist, a bad name or size. Each must be a usage error (exit 2) of
// one line that names the flag, speaks of flags (never Options fields or
// a Go struct), and nothing may panic (a recovered panic exits 7).
func TestEveryFlagRefusesBadValues(t *testing.T) {
	bases := flagWalkBases(t)
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	walked := 0
	for _, c := range commands {
		fs := flagsOf(c)
		if fs == nil {
			t.Errorf("k3 %s --help gives no flag set", c.name)
			continue
		}
		base, ok := bases[c.name]
		if !ok && fs.Lookup("model") != nil {
			base, ok = []string{"--model", bases["run"][1]}, true
		}
		if !ok {
			t.Errorf("k3 %s: no base arguments for the flag walk (add them to flagWalkBases)", c.name)
			continue
		}
		fs.VisitAll(func(f *flag.Flag) {
			values, known := badValues(c.name, fs, f, missing)
			if !known {
				t.Errorf("k3 %s --%s: the walk does not know this string flag's bad values: add them to badStrings, or the flag to anyString", c.name, f.Name)
				return
			}
			names := flagNames(fs, f)
			for _, v := range values {
				args := append([]string{c.name}, withoutFlag(base, f.Name)...)
				args = append(args, "--"+f.Name+"="+v)
				code, _, stderr := runCmd(t, args...)
				walked++
				msg := strings.TrimSpace(stderr)
				switch {
				case code == cli.ExitInternal:
					t.Errorf("k3 %s --%s=%q panicked: %s", c.name, f.Name, v, stderr)
				case code != cli.ExitUsage:
					t.Errorf("k3 %s --%s=%q: exit %d, want %d (a usage error): %s", c.name, f.Name, v, code, cli.ExitUsage, msg)
				case !containsAny(msg, names):
					t.Errorf("k3 %s --%s=%q: the message does not name the flag: %s", c.name, f.Name, v, msg)
				case strings.Contains(msg, "\n"), strings.Contains(msg, "Options."), strings.ContainsAny(msg, "{}"):
					t.Errorf("k3 %s --%s=%q: not one line in the command's terms: %s", c.name, f.Name, v, msg)
				}
			}
		})
	}
	t.Logf("%d bad values of %d commands' flags", walked, len(commands))
	if walked < 300 {
		t.Errorf("the walk ran %d bad values; the commands' flags were not found", walked)
	}
}

// badValues are the values of f (a flag of command cmd's set fs) that
// must be refused; known is false for a string flag the walk cannot
// judge.
func badValues(cmd string, fs *flag.FlagSet, f *flag.Flag, missing string) (values []string, known bool) {
	key := func(m map[string]bool) bool { return m[f.Name] || m[cmd+"/"+f.Name] }
	number := func(huge string) []string {
		v := []string{"abc", huge}
		if !key(negativeOK) {
			v = append(v, "-1")
		}
		if !key(zeroMeans) {
			v = append(v, "0")
		}
		return v
	}
	g, ok := f.Value.(flag.Getter)
	if !ok { // flag.Func: a string
		return stringValues(cmd, fs, f, missing)
	}
	switch g.Get().(type) {
	case bool:
		return []string{"maybe"}, true
	case int, int64, uint, uint64:
		return number("99999999999999999999999"), true
	case float64:
		return append(number("1e999"), "NaN"), true
	case time.Duration:
		v := []string{"abc", "9999999999999h", "-1s"}
		if !key(zeroMeans) {
			v = append(v, "0s")
		}
		return v, true
	}
	return stringValues(cmd, fs, f, missing)
}

func stringValues(cmd string, fs *flag.FlagSet, f *flag.Flag, missing string) ([]string, bool) {
	if cli.IsInputPath(fs, f.Name) {
		return []string{missing}, true
	}
	for _, n := range flagNames(fs, f) { // an alias is judged as its flag
		n = strings.TrimPrefix(n, "--")
		if v := badStrings[cmd+"/"+n]; v != nil {
			return v, true
		}
		if v := badStrings[n]; v != nil {
			return v, true
		}
		if anyString[n] {
			return nil, true
		}
	}
	return nil, false
}

// flagNames are the names a message about f may use: its own, and those
// of the flags it is an alias of (the same value).
func flagNames(fs *flag.FlagSet, f *flag.Flag) []string {
	names := []string{"--" + f.Name}
	fs.VisitAll(func(o *flag.Flag) {
		if o.Name != f.Name && sameValue(o.Value, f.Value) {
			names = append(names, "--"+o.Name)
		}
	})
	return names
}

// withoutFlag drops --name and its value from args.
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--"+name {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// sameValue reports whether a and b are the same variable's flag.Value.
func sameValue(a, b flag.Value) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer && va.Pointer() == vb.Pointer()
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
