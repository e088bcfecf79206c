package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/platform/crash"
)

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{
		"8GB": 8e9, "12GiB": 12 << 30, "1.5 GiB": 3 << 29, "64kib": 64 << 10, "512": 512, "2K": 2000,
		" 3 MB ": 3e6, "1t": 1e12, "0": 0, "100B": 100,
	} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GB", "-1GB", "12XB", "1e400", "10000000TB", "1.2.3GB"} {
		if n, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, n)
		}
	}
}

func TestBudgetFlags(t *testing.T) {
	bytesOf := func(args ...string) (int64, error) {
		var b BudgetFlags
		fs := NewFlags("x", "", &bytes.Buffer{})
		b.Register(fs)
		if err := Parse(fs, args); err != nil {
			return 0, err
		}
		return b.Bytes()
	}
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, 0},
		{[]string{"--budget", "8GB"}, 8e9},
		{[]string{"--budget", "12GiB"}, 12 << 30},
		{[]string{"--preset", "laptop"}, 8e9},
		{[]string{"--preset", "server"}, 128e9},
		{[]string{"--preset", "max"}, 0},
	} {
		if got, err := bytesOf(c.args...); err != nil || got != c.want {
			t.Errorf("%v: %d, %v; want %d", c.args, got, err, c.want)
		}
	}
	for _, args := range [][]string{
		{"--budget", "1GB", "--preset", "max"}, {"--preset", "nope"}, {"--budget", "0"}, {"--budget", "lots"},
	} {
		if _, err := bytesOf(args...); ExitCode(err) != ExitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	names := []string{}
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"laptop", "desktop", "workstation", "server", "max"}) {
		t.Errorf("presets %v", names)
	}
}

// TestParse: --help prints the usage and the flags and is ErrHelp; a wrong
// flag or a stray argument is a one-line usage error with nothing printed.
func TestParse(t *testing.T) {
	newSet := func(stderr *bytes.Buffer) *flag.FlagSet {
		fs := NewFlags("frob", "--n N", stderr)
		fs.Int("n", 1, "how many")
		fs.Bool("b", false, "whether")
		return fs
	}
	var stderr bytes.Buffer
	err := Parse(newSet(&stderr), []string{"--help"})
	var he *HelpError
	if !errors.As(err, &he) || !errors.Is(err, ErrHelp) || ExitCode(err) != ExitOK {
		t.Fatalf("--help: %v, want a *HelpError that is ErrHelp", err)
	}
	if out := he.Usage; !strings.HasPrefix(out, "Usage: k3 frob --n N\n\nFlags:\n") || !strings.Contains(out, "how many") {
		t.Errorf("--help's usage is %q", out)
	}
	if he.Flags == nil || he.Flags.Lookup("n") == nil {
		t.Errorf("--help's flag set has no --n")
	}
	if stderr.Len() != 0 {
		t.Errorf("--help printed %q on stderr; the command prints the usage on stdout", stderr.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus (k3 help frob lists the flags)"},
		{[]string{"--n", "x"}, `--n "x": not a valid value (k3 help frob lists the flags)`},
		{[]string{"--n", "99999999999999999999999"}, `--n "99999999999999999999999": out of range`},
		{[]string{"--n"}, "--n needs a value"},
		{[]string{"--b=maybe"}, "--b=maybe: want true or false"},
		{[]string{"--n", "2", "extra"}, `unexpected argument "extra"`},
	} {
		stderr.Reset()
		err := Parse(newSet(&stderr), c.args)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error with %q", c.args, err, c.want)
		}
		if stderr.Len() != 0 {
			t.Errorf("%v printed %q", c.args, stderr.String())
		}
	}
	fs := newSet(&stderr)
	if err := Parse(fs, []string{"--n", "3"}); err != nil || fs.Lookup("n").Value.String() != "3" {
		t.Errorf("--n 3: %v", err)
	}
}

// TestAlias: an alias sets the same value and is missing from the usage;
// the usage shows each flag's default, not what was parsed before --help.
func TestAlias(t *testing.T) {
	fs := NewFlags("frob", "", &bytes.Buffer{})
	size := fs.String("probe-size", "1GiB", "probe `size`")
	Alias(fs, "probe", "probe-size")
	if err := Parse(fs, []string{"--probe", "2MiB"}); err != nil || *size != "2MiB" {
		t.Fatalf("--probe 2MiB: %v, --probe-size is %q", err, *size)
	}
	err := Parse(fs, []string{"--help"})
	var he *HelpError
	if !errors.As(err, &he) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(he.Usage, "-probe-size size") || strings.Contains(he.Usage, "-probe ") || strings.Contains(he.Usage, "the same as") {
		t.Errorf("the usage lists the alias, or not the flag:\n%s", he.Usage)
	}
	if !strings.Contains(he.Usage, `(default "1GiB")`) {
		t.Errorf("the usage does not show the default 1GiB:\n%s", he.Usage)
	}
}

// TestInputPaths: a file or directory flag marked as an input is checked
// by Parse: missing, or of the other kind, it is a usage error naming the
// flag and the path; an empty value (the default) is not checked.
func TestInputPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	missing := filepath.Join(dir, "missing")
	parse := func(args ...string) error {
		fs := NewFlags("frob", "", &bytes.Buffer{})
		fs.String("in", "", "input `file`")
		fs.String("model", "", "`directory`")
		fs.String("out", "", "output `file`")
		InputFiles(fs, "in")
		InputDirs(fs, "model")
		if !IsInputPath(fs, "in") || !IsInputPath(fs, "model") || IsInputPath(fs, "out") {
			t.Fatal("IsInputPath is wrong")
		}
		return Parse(fs, args)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--in", missing}, "--in " + missing + ": the file does not exist"},
		{[]string{"--model", missing}, "--model " + missing + ": the directory does not exist"},
		{[]string{"--model", file}, "--model " + file + ": not a directory"},
		{[]string{"--in", dir}, "--in " + dir + ": a directory, not a file"},
	} {
		if err := parse(c.args...); ExitCode(err) != ExitUsage || err.Error() != c.want {
			t.Errorf("%v: %v, want a usage error %q", c.args, err, c.want)
		}
	}
	for _, args := range [][]string{nil, {"--in", file, "--model", dir, "--out", missing}} {
		if err := parse(args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestForFlags: the library's *k3.OptionError, told with the flag that
// sets the field; a field without a flag in the set stays as it was.
func TestForFlags(t *testing.T) {
	fs := NewFlags("frob", "", &bytes.Buffer{})
	var mf ModelFlags
	mf.Register(fs)
	for _, c := range []struct {
		err  error
		want string
		code int
	}{
		{&k3.OptionError{Field: "Threads", Value: -1, Reason: "must not be negative", Err: k3.ErrBadOptions}, "--threads -1: must not be negative", ExitUsage},
		{fmt.Errorf("opening: %w", &k3.OptionError{Field: "MaxContext", Value: 100000000, Reason: "too long", Err: k3.ErrBudget}), "--max-context 100000000: too long", ExitBudget},
		{&k3.OptionError{Field: "RAMBudget", Value: int64(0), Reason: "too big for the machine", Err: k3.ErrBudget}, "no --budget: too big for the machine", ExitBudget},
		{&k3.OptionError{Field: "TrunkDir", Value: "/x", Reason: "the directory does not exist", Err: k3.ErrBadOptions}, "--trunk /x: the directory does not exist", ExitUsage},
	} {
		err := ForFlags(c.err, fs)
		if err.Error() != c.want || ExitCode(err) != c.code {
			t.Errorf("%v: %q (exit %d), want %q (exit %d)", c.err, err, ExitCode(err), c.want, c.code)
		}
	}
	oe := &k3.OptionError{Field: "Sessions", Value: -1, Reason: "x", Err: k3.ErrBadOptions}
	if err := ForFlags(oe, fs); err != error(oe) {
		t.Errorf("Sessions, which no flag of the set sets: %v", err)
	}
}

func TestParseBatchSizes(t *testing.T) {
	if got, err := ParseBatchSizes("1,4, 8"); err != nil || !slices.Equal(got, []int{1, 4, 8}) {
		t.Errorf("1,4, 8: %v, %v", got, err)
	}
	for _, s := range []string{"", "1,0", "x", "1,,2", "-1"} {
		if got, err := ParseBatchSizes(s); ExitCode(err) != ExitUsage || !strings.Contains(fmt.Sprint(err), "--batch") {
			t.Errorf("%q: %v, %v; want a usage error naming --batch", s, got, err)
		}
	}
}

func TestExitCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("k3: doing it: %w", err) }
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{ErrHelp, ExitOK},
		{errors.New("boom"), ExitFailure},
		{Usagef("bad %s", "flag"), ExitUsage},
		{wrap(Usagef("bad")), ExitUsage},
		{wrap(k3.ErrBadOptions), ExitUsage},
		{wrap(k3.ErrTokenOutOfRange), ExitUsage},
		{wrap(k3.ErrContextFull), ExitUsage},
		{wrap(k3.ErrBadCheckpoint), ExitCheckpoint},
		{wrap(k3.ErrBadConfig), ExitCheckpoint},
		{wrap(k3.ErrExpertLoad), ExitExpert},
		{wrap(k3.ErrBudget), ExitBudget},
		{wrap(&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}), ExitIO},
		{wrap(&fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}), ExitIO},
		{wrap(syscall.EIO), ExitIO},
		{wrap(crash.ErrInternal), ExitInternal},
		{wrap(ErrInterrupted), ExitInterrupted},
		// A panic whose value is a usage error is still a bug, not a usage error.
		{fmt.Errorf("%w: %w", crash.ErrInternal, Usagef("x")), ExitInternal},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestOpenWithChecksFlags: without --model, or with a bad budget, OpenWith
// is a usage error before it reads anything.
func TestOpenWithChecksFlags(t *testing.T) {
	for _, m := range []ModelFlags{{}, {Dir: t.TempDir(), Budget: BudgetFlags{Preset: "nope"}}} {
		if _, err := m.OpenWith(context.Background(), func(*k3.Options) { t.Error("edit called") }); ExitCode(err) != ExitUsage {
			t.Errorf("%+v: %v, want a usage error", m, err)
		}
	}
	m := ModelFlags{Dir: t.TempDir()}
	if _, err := m.Open(context.Background()); ExitCode(err) != ExitCheckpoint {
		t.Errorf("an empty directory: %v, want a bad checkpoint", err)
	}
}

// TestText: the library's marks naming its functions are dropped from a
// message for the command's user; the rest stays.
func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"k3: LoadFile: open x: no such file or directory":         "open x: no such file or directory",
		"k3: Model.Step: invalid options: called twice":           "invalid options: called twice",
		"loading: k3: Generate: invalid options: MaxTokens -1":    "loading: invalid options: MaxTokens -1",
		"k3: checkpoint directory /x does not exist":              "k3: checkpoint directory /x does not exist",
		"k3: bad model config: missing keys: hidden_size":         "k3: bad model config: missing keys: hidden_size",
		"k3: RAM budget too small: the floor needs 5.46 GB (...)": "k3: RAM budget too small: the floor needs 5.46 GB (...)",
	} {
		if got := Text(errors.New(in)); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}
