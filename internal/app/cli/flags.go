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
// Parse passes it on to stderr only for --help, so a wrong flag gets one
// line (printed by the command with the subcommand's name) rather than the
// whole flag list between two copies of the error.
func NewFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(&heldOutput{stderr: stderr})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: k3 %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// heldOutput keeps what the flag package prints until Parse knows whether
// it was asked for.
type heldOutput struct {
	bytes.Buffer
	stderr io.Writer
}

// Parse parses args with fs (made by NewFlags), turning flag errors and
// arguments left over into usage errors and --help into ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if out, ok := fs.Output().(*heldOutput); ok {
		if errors.Is(err, flag.ErrHelp) {
			out.stderr.Write(out.Bytes())
		}
		out.Reset()
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ErrHelp
		}
		return Usagef("%v (k3 help %s lists the flags)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
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
