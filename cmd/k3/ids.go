package main

import (
	"strconv"
	"strings"

	"github.com/k3go/k3/internal/app/cli"
)

// parseIDs reads a list of token ids separated by commas or whitespace.
func parseIDs(s string) ([]int, error) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	ids := make([]int, 0, len(f))
	for _, x := range f {
		v, err := strconv.Atoi(x)
		if err != nil || v < 0 {
			return nil, cli.Usagef("bad token id %q", x)
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, cli.Usagef("no token ids")
	}
	return ids, nil
}

// parseIDsFlag is parseIDs of the value of --name, with the flag named in
// its error.
func parseIDsFlag(name, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, cli.Usagef("--%s is required: token ids, comma separated", name)
	}
	ids, err := parseIDs(s)
	if err != nil {
		return nil, cli.Usagef("--%s %q: %v", name, s, err)
	}
	return ids, nil
}
