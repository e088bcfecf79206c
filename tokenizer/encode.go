package tokenizer

import "fmt"

// EncodeOptions adjusts encoding. The zero value is the reference
// behaviour.
type EncodeOptions struct {
	// NoAddedTokens makes added-token strings such as "<|im_end|>"
	// ordinary text, so that untrusted input cannot produce control ids.
	// By default every added token is recognised.
	NoAddedTokens bool
	// NoCuts encodes the text in one piece, as tiktoken's core does. By
	// default it is first cut as the release's tokenizer cuts it (see
	// [MaxEncodeChars] and [MaxRunChars]), which changes the ids of very
	// long runs.
	NoCuts bool
}

// Encode returns the token ids of text, recognising added tokens. Text is
// taken as bytes: invalid UTF-8 is encoded byte-exactly, so that
// Decode(Encode(text)) == text for every string (for pre-tokenization a
// stray byte counts as the Latin-1 character of the same value). No BOS or
// EOS is added.
//
// Encoding follows tiktoken: added tokens are found first (the earliest
// match, the longest there); the text between them is split into
// pre-tokens by [Pattern]; each pre-token that is itself a vocabulary key
// becomes its rank, and any other is merged byte-pair by byte-pair, always
// joining the adjacent pair whose concatenation has the lowest rank (the
// leftmost on a tie). Before all this the text is cut as the release's
// tokenizer cuts it: into pieces of at most [MaxEncodeChars] code points
// with no run of more than [MaxRunChars] whitespace or non-whitespace code
// points, each piece encoded on its own. The one departure from the
// release: a single pre-token longer than 1 GiB is merged in halves.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/4+8), text, EncodeOptions{})
}

// EncodeOrdinary is Encode with added tokens treated as ordinary text.
func (t *Tokenizer) EncodeOrdinary(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/4+8), text, EncodeOptions{NoAddedTokens: true})
}

// AppendEncode appends the token ids of text to dst and returns the
// extended slice. It does not allocate when dst has room (working memory
// comes from a pool).
func (t *Tokenizer) AppendEncode(dst []int, text string, opts EncodeOptions) []int {
	sc := getScratch()
	defer putScratch(sc)
	// A run cannot exceed MaxRunChars code points without having as many
	// bytes: short text is never cut.
	if opts.NoCuts || len(text) <= MaxRunChars {
		return t.appendCut(dst, text, opts, sc)
	}
	c := cutter{s: text}
	for p, ok := c.next(); ok; p, ok = c.next() {
		dst = t.appendCut(dst, p, opts, sc)
	}
	return dst
}

// appendCut encodes one piece of the release's cuts.
func (t *Tokenizer) appendCut(dst []int, text string, opts EncodeOptions, sc *scratch) []int {
	if opts.NoAddedTokens || t.match == nil {
		return t.appendOrdinary(dst, text, sc)
	}
	f := t.match.finder()
	for start := 0; ; {
		p, end, id := f.find(text, start)
		if p < 0 {
			return t.appendOrdinary(dst, text[start:], sc)
		}
		dst = t.appendOrdinary(dst, text[start:p], sc)
		dst = append(dst, id)
		start = end
	}
}

// appendOrdinary encodes s with no added tokens; s is one chunk for the
// pre-tokenizer.
func (t *Tokenizer) appendOrdinary(dst []int, s string, sc *scratch) []int {
	for i := 0; i < len(s); {
		e := nextPiece(s, i)
		// appendPiece's first two cases, inlined.
		if e-i == 1 {
			dst = append(dst, int(t.byteRank[s[i]]))
		} else if r, ok := t.v.lookup(s, i, e); ok {
			dst = append(dst, int(r))
		} else {
			dst = t.appendPiece(dst, s, i, e, sc)
		}
		i = e
	}
	return dst
}

// Decode returns the text of ids: the bytes of each rank, and the literal
// content of each added token. The text is the exact byte string that was
// encoded; it need not be valid UTF-8 when ids is a slice of a longer
// sequence. If an id is unknown, Decode skips it, carries on, and returns
// the text of the known ids with an error that wraps [ErrUnknownID] and
// names the first unknown id.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	b, err := t.AppendDecode(nil, ids)
	return string(b), err
}

// DecodeLenient is Decode that silently skips unknown ids, as the reference
// engine does.
func (t *Tokenizer) DecodeLenient(ids []int) string {
	s, _ := t.Decode(ids)
	return s
}

// AppendDecode appends the text of ids to dst, as Decode does, and returns
// the extended slice.
func (t *Tokenizer) AppendDecode(dst []byte, ids []int) ([]byte, error) {
	var err error
	for k, id := range ids {
		b, ok := t.v.bytesOf(id)
		if !ok {
			if err == nil {
				err = unknownID(id, k)
			}
			continue
		}
		dst = append(dst, b...)
	}
	return dst, err
}

// unknownID returns an error naming id and, when index >= 0, its index.
func unknownID(id, index int) error {
	if index < 0 {
		return fmt.Errorf("tokenizer: id %d: %w", id, ErrUnknownID)
	}
	return fmt.Errorf("tokenizer: id %d at index %d: %w", id, index, ErrUnknownID)
}

// TokenBytes returns a copy of the bytes of token id (the literal content
// for an added token), or false if the id is unknown.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	b, ok := t.v.bytesOf(id)
	if !ok {
		return nil, false
	}
	return []byte(b), true
}

// ID returns the id of the token whose bytes are exactly content: an added
// token first (such as "<|im_end|>"), else a vocabulary key.
func (t *Tokenizer) ID(content string) (int, bool) {
	if id, ok := t.addedID[content]; ok {
		return id, true
	}
	if content == "" {
		return 0, false
	}
	r, ok := t.v.lookup(content, 0, len(content))
	return int(r), ok
}

// AddedTokens returns the added tokens, sorted by id.
func (t *Tokenizer) AddedTokens() []AddedToken {
	return append([]AddedToken(nil), t.added...)
}

// VocabSize returns one more than the largest id, ranks and added tokens
// together: the number of rows an embedding table needs.
func (t *Tokenizer) VocabSize() int { return len(t.v.toks) }
