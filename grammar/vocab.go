package grammar

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/k3go/k3/grammar/internal/lexer"
)

// SpecialToken is a special (control) token of a vocabulary: a token that is
// one symbol, never a byte string. Grammars refer to it by Name (for
// example "<|close|>").
type SpecialToken struct {
	ID   int
	Name string
}

// ErrVocab is wrapped by the errors of building a [Vocab] from bad input.
var ErrVocab = errors.New("grammar: bad vocabulary")

// Vocab is a tokenizer's vocabulary as the masks see it: the bytes of
// every ordinary token, and the special tokens as distinct symbols. It
// holds what is computed once per tokenizer: a trie of the tokens' bytes,
// so that a mask walks each shared prefix once, and the token classes of
// JSON strings (which tokens stay inside a string and with how many
// characters), filled in as masks first need them. Build it once per
// tokenizer and share it; it is safe for concurrent use.
type Vocab struct {
	size     int
	tokens   []string // by id; "" for ids that are not ordinary tokens
	specials []SpecialToken
	byName   map[string]int // special name → index in specials
	symOf    []int32        // id → index in specials, or -1
	trie     lexer.Trie
	ordinary []uint64 // mask of every ordinary token

	// classes holds the string token classes that depend on no grammar
	// (plain strings, and formats), keyed by lexer.ClassKey; prepared is the
	// size of those of plain strings.
	classes  sync.Map
	prepared int
}

// NewVocab builds a vocabulary: the trie of its tokens, and the token
// classes of plain strings. tokens[id] holds the bytes of ordinary
// token id; an empty entry is an id that is not an ordinary token (a
// special token, or a hole in the id space). specials lists the special
// tokens with distinct ids and names; a special's entry in tokens is
// ignored. The vocabulary's size, the length of a mask in bits, is the
// largest of len(tokens) and every special id plus one.
func NewVocab(tokens [][]byte, specials []SpecialToken) (*Vocab, error) {
	v := &Vocab{size: len(tokens), byName: make(map[string]int, len(specials))}
	for _, s := range specials {
		if s.ID < 0 || s.ID >= 1<<30 {
			return nil, fmt.Errorf("%w: special %q has id %d", ErrVocab, s.Name, s.ID)
		}
		if s.Name == "" {
			return nil, fmt.Errorf("%w: special token %d has no name", ErrVocab, s.ID)
		}
		v.size = max(v.size, s.ID+1)
	}
	v.specials = slices.Clone(specials)
	slices.SortFunc(v.specials, func(a, b SpecialToken) int { return a.ID - b.ID })
	v.symOf = make([]int32, v.size)
	for i := range v.symOf {
		v.symOf[i] = -1
	}
	for k, s := range v.specials {
		if v.symOf[s.ID] >= 0 {
			return nil, fmt.Errorf("%w: two special tokens have id %d", ErrVocab, s.ID)
		}
		if _, dup := v.byName[s.Name]; dup {
			return nil, fmt.Errorf("%w: two special tokens are named %q", ErrVocab, s.Name)
		}
		v.symOf[s.ID] = int32(k)
		v.byName[s.Name] = k
	}
	v.tokens = make([]string, v.size)
	v.ordinary = make([]uint64, maskWords(v.size))
	for id, b := range tokens {
		if len(b) == 0 || v.symOf[id] >= 0 {
			continue
		}
		if len(b) > maxTokenLen {
			return nil, fmt.Errorf("%w: token %d is %d bytes long, more than %d", ErrVocab, id, len(b), maxTokenLen)
		}
		v.tokens[id] = string(b)
		v.ordinary[id>>6] |= 1 << (id & 63)
	}
	v.trie = lexer.BuildTrie(v.tokens)
	v.prepared = v.prepare()
	return v, nil
}

// prepare computes the token classes of plain JSON and raw strings in
// every lexer state (a few milliseconds each, 2.4 MiB in all for K3's
// vocabulary), so that no request pays for them. It returns the bytes
// the classes take.
func (v *Vocab) prepare() int {
	size := 0
	for _, raw := range []bool{false, true} {
		for sub := uint8(lexer.SubNormal); sub < lexer.SubClosed; sub++ {
			if raw && sub >= lexer.SubEsc && sub <= lexer.SubU3 {
				continue // no escapes in raw strings
			}
			k := lexer.ClassKey{Sub: sub, Raw: raw}
			e, ok := v.classes.Load(k)
			if !ok {
				e, _ = v.classes.LoadOrStore(k, lexer.BuildStringClass(&v.trie, v.tokens, v.size, k))
			}
			size += e.(*lexer.ClassEntry).Bytes()
		}
	}
	return size
}

// maxTokenLen bounds a token's length: the trie keeps depths in 16 bits.
const maxTokenLen = 1<<16 - 1

// Size returns the number of token ids: a mask has Size() bits.
func (v *Vocab) Size() int { return v.size }

// MaskWords returns the length in words of a mask over v.
func (v *Vocab) MaskWords() int { return maskWords(v.size) }

func maskWords(n int) int { return (n + 63) / 64 }

// Specials returns the special tokens, sorted by id.
func (v *Vocab) Specials() []SpecialToken { return slices.Clone(v.specials) }

// SpecialID returns the id of the special token named name.
func (v *Vocab) SpecialID(name string) (int, bool) {
	k, ok := v.byName[name]
	if !ok {
		return 0, false
	}
	return v.specials[k].ID, true
}

// TokenBytes returns the bytes of ordinary token id, or false for a
// special token or an unknown id.
func (v *Vocab) TokenBytes(id int) ([]byte, bool) {
	if id < 0 || id >= v.size || v.tokens[id] == "" {
		return nil, false
	}
	return []byte(v.tokens[id]), true
}
