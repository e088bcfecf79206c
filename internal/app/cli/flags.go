package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// NewFlags returns the flag set of subcommand name, whose usage line
// (after "k3 name ") is usage. It reports errors instead of exiting. The
// flag package prints the usage for --help and for a wrong flag alike;
// Parse keeps it, and returns it in a *HelpError for --help only (the
// command prints it on stdout, so that "k3 help run | less" shows it), so
// a wrong flag gets one line (printed by the command with the
// subcommand's name) rather than the whole flag list between two copies
// of the error. Nothing is written to the last argument (the command's
// stderr, where the flag package would print on its own); it stays so that
// every command builds its flags alike.
func NewFlags(name, usage string, _ io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	out := &heldOutput{}
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: k3 %s %s\n\nFlags:\n", name, usage)
		printDefaults(fs, out.hidden)
	}
	return fs
}

// heldOutput keeps what the flag package prints until Parse knows whether
// it was asked for, and the names of the flag set's hidden aliases.
type heldOutput struct {
	bytes.Buffer
	hidden map[string]bool
	inputs map[string]pathKind // InputFiles, InputDirs
}

// Alias defines --alias as another name of the flag name already defined
// on fs (made by NewFlags): it sets the same value, and the usage does not
// list it. An old spelling keeps working after a flag is renamed.
func Alias(fs *flag.FlagSet, alias, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("cli.Alias: no flag --" + name)
	}
	fs.Var(f.Value, alias, "the same as --"+name)
	if out, ok := fs.Output().(*heldOutput); ok {
		if out.hidden == nil {
			out.hidden = map[string]bool{}
		}
		out.hidden[alias] = true
	}
}

// printDefaults prints fs's flags as flag.PrintDefaults does, without the
// hidden ones.
func printDefaults(fs *flag.FlagSet, hidden map[string]bool) {
	if len(hidden) == 0 {
		fs.PrintDefaults()
		return
	}
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if !hidden[f.Name] {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue // not the value parsed so far
		}
	})
	shown.PrintDefaults()
}

// HelpError is what Parse returns for --help (or -h): the command's usage
// and flags, to be printed on stdout, and the flag set itself, so that a
// caller can list a command's flags. It is ErrHelp for errors.Is, and a
// command exits 0 with it.
type HelpError struct {
	Usage string
	Flags *flag.FlagSet
}

func (e *HelpError) Error() string { return ErrHelp.Error() }

// Is makes errors.Is(err, ErrHelp) hold.
func (e *HelpError) Is(target error) bool { return target == ErrHelp }

// Parse parses args with fs (made by NewFlags), turning flag errors and
// arguments left over into usage errors that name the flag as a user
// writes it (--threads "x": not a valid value), and --help into a
// *HelpError. Input paths (InputFiles, InputDirs) that do not exist are
// usage errors too.
func Parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	var usage string
	if out, ok := fs.Output().(*heldOutput); ok {
		usage = out.String()
		out.Reset()
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &HelpError{Usage: usage, Flags: fs}
		}
		return Usagef("%s (k3 help %s lists the flags)", flagErrorText(err), fs.Name())
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected argument %q", fs.Arg(0))
	}
	return checkInputs(fs)
}

// ParseBatchSizes reads a --batch list: positive sizes, comma separated.
// A bad one is a usage error that names --batch.
func ParseBatchSizes(s string) ([]int, error) {
	var bs []int
	for _, f := range strings.Split(s, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b < 1 {
			return nil, Usagef("--batch: bad batch size %q (want positive sizes, e.g. 1,4,8,16)", f)
		}
		bs = append(bs, b)
	}
	return bs, nil
}
