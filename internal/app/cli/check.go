package cli

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine/planner"
)

// InputFiles marks flags of fs (made by NewFlags) whose value names a file
// that must exist; InputDirs flags that name a directory. Parse then
// refuses a path that is not there as a usage error naming the flag ("--
// prompt-file notes.txt: the file does not exist"), before the command
// does anything. An empty value is not checked (the flag's default).
func InputFiles(fs *flag.FlagSet, names ...string) { markInputs(fs, pathFile, names) }

// InputDirs: see InputFiles.
func InputDirs(fs *flag.FlagSet, names ...string) { markInputs(fs, pathDir, names) }

// InputPaths: see InputFiles; a file or a directory will do.
func InputPaths(fs *flag.FlagSet, names ...string) { markInputs(fs, pathEither, names) }

type pathKind int

const (
	pathFile pathKind = iota + 1
	pathDir
	pathEither
)

func markInputs(fs *flag.FlagSet, kind pathKind, names []string) {
	out, ok := fs.Output().(*heldOutput)
	if !ok {
		return
	}
	if out.inputs == nil {
		out.inputs = map[string]pathKind{}
	}
	for _, n := range names {
		if fs.Lookup(n) == nil {
			panic("cli: no flag --" + n)
		}
		out.inputs[n] = kind
	}
}

// IsInputPath reports whether --name of fs names a file or directory that
// must exist (InputFiles, InputDirs).
func IsInputPath(fs *flag.FlagSet, name string) bool {
	out, ok := fs.Output().(*heldOutput)
	return ok && out.inputs[name] != 0
}

// checkInputs refuses, as usage errors naming the flag, the input paths
// (InputFiles, InputDirs) set on fs that are missing or of the wrong kind.
func checkInputs(fs *flag.FlagSet) error {
	out, ok := fs.Output().(*heldOutput)
	if !ok || len(out.inputs) == 0 {
		return nil
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		kind := out.inputs[f.Name]
		v := f.Value.String()
		if err != nil || kind == 0 || v == "" {
			return
		}
		if kind == pathEither {
			if _, serr := os.Stat(v); serr != nil {
				err = Usagef("--%s %s: %v", f.Name, v, errors.Unwrap(serr))
				if os.IsNotExist(serr) {
					err = Usagef("--%s %s: no such file or directory", f.Name, v)
				}
			}
			return
		}
		err = CheckPath("--"+f.Name, v, kind == pathDir)
		if err != nil && kind == pathDir && strings.Contains(v, ",") {
			// A list of directories (k3 bench --trunk A,B).
			err = nil
			for _, d := range strings.Split(v, ",") {
				if err == nil {
					err = CheckPath("--"+f.Name, d, true)
				}
			}
		}
	})
	return err
}

// CheckPath refuses a path given as what (a flag, "--model") that does
// not exist or is not a directory (dir) or a file (!dir): a usage error
// that names it.
func CheckPath(what, path string, dir bool) error {
	noun := map[bool]string{true: "directory", false: "file"}[dir]
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Usagef("%s %s: the %s does not exist", what, path, noun)
	case err != nil:
		return Usagef("%s %s: %v", what, path, errors.Unwrap(err))
	case dir && !st.IsDir():
		return Usagef("%s %s: not a directory", what, path)
	case !dir && st.IsDir():
		return Usagef("%s %s: a directory, not a file", what, path)
	}
	return nil
}

// The flag package's errors, rewritten to name the flag as the command's
// users write it (--name) with the bad value first.
var (
	flagValueErr = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)
	flagBoolErr  = regexp.MustCompile(`^invalid boolean value "(.*)" for -([^:]+): (.*)$`)
	flagUnknown  = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	flagNoValue  = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
)

// flagErrorText words an error of the flag package for the user.
func flagErrorText(err error) string {
	msg := err.Error()
	if m := flagValueErr.FindStringSubmatch(msg); m != nil {
		why := m[3]
		switch why {
		case "parse error":
			why = "not a valid value"
		case "value out of range":
			why = "out of range"
		}
		return fmt.Sprintf("--%s %q: %s", m[2], m[1], why)
	}
	if m := flagBoolErr.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s=%s: want true or false", m[2], m[1])
	}
	if m := flagUnknown.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown flag --%s", m[1])
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s needs a value", m[1])
	}
	return msg
}

// optionFlags are the flags that set each k3.Options field, in the
// commands that have them.
var optionFlags = map[string]string{
	"RAMBudget": "budget", "Threads": "threads", "MaxContext": "max-context", "PrefillChunk": "prefill-chunk",
	"Sessions": "sessions", "MaxBatch": "max-batch", "Speculate": "spec", "TrunkDir": "trunk",
	"TokenizerDir": "tokenizer", "PrefixCache.BlockTokens": "prefix-cache-block", "PrefixCache.Dir": "prefix-cache-dir",
	"Cluster.Timeout": "peer-timeout", "Cluster.LoadTimeout": "peer-load-timeout",
}

// FlagError is an option the library refused (a *k3.OptionError), told in
// the command's terms: the flag that set it, the value and why. It wraps
// the library's sentinel (ErrBadOptions: exit 2; ErrBudget: exit 5).
type FlagError struct {
	Flag   string // "--max-context", or "no --budget"
	Value  string // "" when not given
	Reason string
	err    error
}

func (e *FlagError) Error() string {
	if e.Value == "" {
		return e.Flag + ": " + e.Reason
	}
	return e.Flag + " " + e.Value + ": " + e.Reason
}

func (e *FlagError) Unwrap() error { return e.err }

// ForFlags turns a *k3.OptionError in err into a *FlagError naming the
// flag of fs that sets the field; other errors, and fields no flag of fs
// sets, are returned as they are.
func ForFlags(err error, fs *flag.FlagSet) error {
	var oe *k3.OptionError
	if fs == nil || !errors.As(err, &oe) {
		return err
	}
	name := optionFlags[oe.Field]
	if name == "" || fs.Lookup(name) == nil {
		return err
	}
	fe := &FlagError{Flag: "--" + name, Value: fmt.Sprint(oe.Value), Reason: oe.Reason, err: oe.Err}
	switch v := oe.Value.(type) {
	case int64:
		if oe.Field == "RAMBudget" {
			fe.Value = planner.Human(v)
			if v == 0 {
				fe.Flag, fe.Value = "no --budget", ""
			}
		}
	case string:
		fe.Value = v
	}
	return fe
}

// NotNegative returns a usage error naming --name when v < 0.
func NotNegative[T int | int64 | float64 | time.Duration](name string, v T, zero string) error {
	if v < 0 {
		return Usagef("--%s %v: must not be negative (0 = %s)", name, v, zero)
	}
	return nil
}

// Positive returns a usage error naming --name when v <= 0.
func Positive[T int | int64 | float64 | time.Duration](name string, v T) error {
	if v <= 0 {
		return Usagef("--%s %v: must be positive", name, v)
	}
	return nil
}

// FirstError returns the first error that is not nil.
func FirstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
