package tokenizer

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrUnknownID is wrapped by the errors of decoding methods when an id is
// neither a vocabulary rank nor an added token.
var ErrUnknownID = errors.New("tokenizer: unknown token id")

// MaxID is the largest token id (rank or added-token id) the package
// accepts.
const MaxID = 1<<24 - 1

// MaxTokenLen is the longest token, in bytes, the package accepts.
const MaxTokenLen = 1<<16 - 1

// AddedToken is a token matched atomically in text before pre-tokenization,
// such as "[BOS]" or "<|im_end|>", with the literal id it is given in
// tokenizer_config.json.
type AddedToken struct {
	ID      int
	Content string
	// Special is the "special" flag of tokenizer_config.json. It does not
	// change encoding or decoding; callers may use it to hide control
	// tokens when displaying text.
	Special bool
}

// Tokenizer encodes text to token ids and back. It is immutable once built
// and safe for concurrent use.
type Tokenizer struct {
	v        vocab
	byteRank [256]uint32
	added    []AddedToken // sorted by id
	addedID  map[string]int
	match    *addedMatcher // nil when there are no added tokens
}

// FormatError reports a malformed vocabulary or configuration.
type FormatError struct {
	File string // file name, or "" for in-memory input
	Line int    // 1-based line, or 0 when the problem is not on one line
	Msg  string
}

func (e *FormatError) Error() string {
	switch {
	case e.File == "":
		return "tokenizer: " + e.Msg
	case e.Line == 0:
		return fmt.Sprintf("tokenizer: %s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("tokenizer: %s:%d: %s", e.File, e.Line, e.Msg)
}

// rawTok is a vocabulary entry whose bytes are arena[off:off+n].
type rawTok struct {
	off, n, rank uint32
	line         int32
}

// rawAdded is an added token with the line of its entry.
type rawAdded struct {
	AddedToken
	line int
}

// New builds a tokenizer from an in-memory vocabulary (token bytes to rank)
// and added tokens. The vocabulary must contain every single byte, as
// byte-level BPE requires; ranks and added ids must be distinct, in
// [0, MaxID], and not much sparser than the number of tokens (the id space
// may be at most twice the number of tokens plus 1024).
func New(ranks map[string]int, added []AddedToken) (*Tokenizer, error) {
	var arena []byte
	toks := make([]rawTok, 0, len(ranks))
	for s, r := range ranks {
		if r < 0 || r > MaxID {
			return nil, &FormatError{Msg: fmt.Sprintf("rank %d of %q out of range [0, %d]", r, s, MaxID)}
		}
		if len(s) == 0 || len(s) > MaxTokenLen {
			return nil, &FormatError{Msg: fmt.Sprintf("token of rank %d has length %d, want 1..%d", r, len(s), MaxTokenLen)}
		}
		toks = append(toks, rawTok{off: uint32(len(arena)), n: uint32(len(s)), rank: uint32(r)})
		arena = append(arena, s...)
	}
	// Map order is random: sort so that errors are deterministic.
	slices.SortFunc(toks, func(a, b rawTok) int { return cmp.Compare(a.rank, b.rank) })
	ra := make([]rawAdded, len(added))
	for k, a := range added {
		ra[k] = rawAdded{AddedToken: a}
	}
	return build("", arena, toks, "", ra)
}

// build assembles a tokenizer. modelFile and configFile name the sources in
// errors.
func build(modelFile string, arena []byte, toks []rawTok, configFile string, added []rawAdded) (*Tokenizer, error) {
	merr := func(line int32, format string, args ...any) error {
		return &FormatError{File: modelFile, Line: int(line), Msg: fmt.Sprintf(format, args...)}
	}
	aerr := func(line int, format string, args ...any) error {
		return &FormatError{File: configFile, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if len(toks) == 0 {
		return nil, merr(0, "empty vocabulary")
	}
	maxID := 0
	for _, tk := range toks {
		maxID = max(maxID, int(tk.rank))
	}
	seenContent := make(map[string]int, len(added))
	for _, a := range added {
		switch {
		case a.ID < 0 || a.ID > MaxID:
			return nil, aerr(a.line, "added token id %d out of range [0, %d]", a.ID, MaxID)
		case a.Content == "" || len(a.Content) > MaxTokenLen:
			return nil, aerr(a.line, "added token %d has length %d, want 1..%d", a.ID, len(a.Content), MaxTokenLen)
		}
		if prev, dup := seenContent[a.Content]; dup {
			return nil, aerr(a.line, "added tokens %d and %d share the content %q", prev, a.ID, a.Content)
		}
		seenContent[a.Content] = a.ID
		maxID = max(maxID, a.ID)
	}
	if n := len(toks) + len(added); maxID >= 2*n+1024 {
		return nil, merr(0, "ids too sparse: highest id %d for %d tokens", maxID, n)
	}
	size := len(arena)
	for _, a := range added {
		size += len(a.Content)
	}
	if size > math.MaxUint32 {
		return nil, merr(0, "%d bytes of tokens, more than 4 GiB", size)
	}

	t := new(Tokenizer)
	for _, a := range added {
		arena = append(arena, a.Content...)
	}
	t.v.arena = string(arena)
	t.v.toks = make([]tokRef, maxID+1)
	for _, tk := range toks {
		if t.v.toks[tk.rank].n != 0 {
			return nil, merr(tk.line, "duplicate rank %d", tk.rank)
		}
		t.v.toks[tk.rank] = tokRef{off: tk.off, n: tk.n}
	}
	t.v.initSlots(len(toks))
	for _, tk := range toks {
		if prev, ok := t.v.insert(tk.rank); !ok {
			return nil, merr(tk.line, "token of rank %d duplicates rank %d (%q)", tk.rank, prev, t.v.arena[tk.off:tk.off+tk.n])
		}
	}
	t.v.initPair2()
	var all [256]byte
	for b := range all {
		all[b] = byte(b)
	}
	allBytes := string(all[:])
	for b := range 256 {
		r, ok := t.v.lookup(allBytes, b, b+1)
		if !ok {
			return nil, merr(0, "no token for the single byte 0x%02x (byte-level BPE needs all 256)", b)
		}
		t.byteRank[b] = r
	}

	off := uint32(len(arena))
	for _, a := range added {
		off -= uint32(len(a.Content))
	}
	t.addedID = make(map[string]int, len(added))
	isAdded := make(map[int]bool, len(added))
	for _, a := range added {
		if isAdded[a.ID] {
			return nil, aerr(a.line, "duplicate added token id %d", a.ID)
		}
		if t.v.toks[a.ID].n != 0 {
			return nil, aerr(a.line, "added token id %d is also a vocabulary rank", a.ID)
		}
		isAdded[a.ID] = true
		t.v.toks[a.ID] = tokRef{off: off, n: uint32(len(a.Content))}
		off += uint32(len(a.Content))
		t.addedID[a.Content] = a.ID
		t.added = append(t.added, a.AddedToken)
	}
	slices.SortFunc(t.added, func(a, b AddedToken) int { return cmp.Compare(a.ID, b.ID) })
	t.match = newAddedMatcher(t.added)
	return t, nil
}
