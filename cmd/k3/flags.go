package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// errHelp reports that --help was handled.
var errHelp = errors.New("help shown")

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: k3 %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, turning flag errors into usage errors and --help into
// errHelp.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usagef("%v", err)
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
