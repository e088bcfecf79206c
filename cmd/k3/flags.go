package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// errHelp reports that --help was handled.
var errHelp = errors.New("help shown")

// newFlags returns a FlagSet that reports errors instead of exiting. The
// flag package prints the usage for --help and for a wrong flag alike;
// parse passes it on to stderr only for --help, so a wrong flag gets one
// line (printed by main with the command's name) rather than the whole
// flag list between two copies of the error.
func newFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(&heldOutput{stderr: stderr})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: k3 %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// heldOutput keeps what the flag package prints until parse knows whether
// it was asked for.
type heldOutput struct {
	bytes.Buffer
	stderr io.Writer
}

// parse parses flags, turning flag errors into usage errors and --help into
// errHelp.
func parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if out, ok := fs.Output().(*heldOutput); ok {
		if errors.Is(err, flag.ErrHelp) {
			out.stderr.Write(out.Bytes())
		}
		out.Reset()
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usagef("%v (k3 help %s lists the flags)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// parseIDs reads a list of token ids separated by commas or whitespace.
func parseIDs(s string) ([]int, error) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	ids := make([]int, 0, len(f))
	for _, x := range f {
		v, err := strconv.Atoi(x)
		if err != nil || v < 0 {
			return nil, usagef("bad token id %q", x)
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, usagef("no token ids")
	}
	return ids, nil
}
