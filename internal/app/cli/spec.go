package cli

import (
	"flag"
	"strconv"
	"strings"

	"github.com/k3go/k3"
)

// SpecFlag is --spec: auto (the engine decides every pass how many drafted
// tokens each sequence verifies, none where rows cost more than they
// return), off, or a draft length N (up to N drafts whenever the drafter
// has any, whatever they cost). Its value is GenerateOptions.Speculate's
// (and Options.Speculate's): k3.SpeculateAuto, 0 or N.
type SpecFlag struct {
	N int
}

// Register defines --spec on fs with the default def (k3.SpeculateAuto or
// 0).
func (f *SpecFlag) Register(fs *flag.FlagSet, def int) {
	f.N = def
	fs.Var(f, "spec", "speculative decoding: auto (verify the drafted tokens that pay for their rows, pass by pass: none where every weight is resident or the batch is large), off, or `N` (up to N drafts per pass whenever the drafter has some, whatever they cost); the output is exactly that of plain decoding")
}

// RegisterWorker defines a worker's --spec on fs (default off): rank
// 0's, so that the worker's budget holds its heads' share of each
// speculating session.
func (f *SpecFlag) RegisterWorker(fs *flag.FlagSet) {
	f.N = 0
	fs.Var(f, "spec", "rank 0's --spec (auto, off or `N`): the budget holds this rank's copy and record of its KDA heads for each session's speculation")
}

// String implements flag.Value.
func (f *SpecFlag) String() string {
	switch {
	case f == nil:
		return ""
	case f.N == k3.SpeculateAuto:
		return "auto"
	case f.N == 0:
		return "off"
	}
	return strconv.Itoa(f.N)
}

// Set implements flag.Value.
func (f *SpecFlag) Set(s string) error {
	n, err := ParseSpec(s)
	if err != nil {
		return err
	}
	f.N = n
	return nil
}

// ParseSpec reads a --spec value: auto, off (or 0), or a positive draft
// length.
func ParseSpec(s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		return k3.SpeculateAuto, nil
	case "off", "0":
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, Usagef("--spec: want auto, off or a positive number of drafted tokens, not %q", s)
	}
	if n > k3.MaxSpeculate {
		return 0, Usagef("--spec: at most %d drafted tokens per pass, not %d", k3.MaxSpeculate, n)
	}
	return n, nil
}
