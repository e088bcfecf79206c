package prefix

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
)

// FormatVersion is the version of the key derivation and of the entry file
// format. It is hashed into every key (through the seed) and written into
// every file header, so a change to either makes old entries unreachable
// and, on disk, recognisably old.
const FormatVersion = 1

// MaxBlockSize bounds the block size: a state entry's tail is shorter than
// one block and is hashed at every lookup, so huge blocks would make
// lookups slow for nothing.
const MaxBlockSize = 1 << 16

// Domain-separation tags: each hash input starts with one, so a seed, a
// block key and a state key can never be equal for different inputs, even
// where the bytes after the tag would coincide (a state key with an empty
// tail is hashed over the same anchor as the next block key).
const (
	tagSeed        = "k3/prefix/seed\x00"
	tagBlock       = "k3/prefix/block\x00"
	tagState       = "k3/prefix/state\x00"
	tagFingerprint = "k3/prefix/fingerprint\x00"
)

// Key names a cache entry: a SHA-256 digest.
type Key [sha256.Size]byte

// String returns the key in lower-case hex (its file name on disk).
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey parses the hex form written by [Key.String].
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*len(k) {
		return k, fmt.Errorf("prefix: key %q: want %d hex digits", s, 2*len(k))
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("prefix: key %q: %w", s, err)
	}
	return k, nil
}

// fingerprintID is the fixed-size form of a fingerprint string written into
// file headers and directory names.
func fingerprintID(fingerprint string) Key {
	h := sha256.New()
	h.Write([]byte(tagFingerprint))
	h.Write([]byte(fingerprint))
	var k Key
	h.Sum(k[:0])
	return k
}

// Hasher derives the keys of one model at one block size. It is immutable
// and safe for concurrent use.
type Hasher struct {
	seed Key
	b    int
}

// NewHasher returns the hasher for a model content fingerprint and a block
// size B (tokens per block). The fingerprint must name everything a
// payload depends on: the checkpoint's content (model.Plan.Fingerprint),
// and the engine's own payload layout version if it has one, so entries of
// another checkpoint or layout get other keys and are never found.
func NewHasher(fingerprint string, blockSize int) (*Hasher, error) {
	if fingerprint == "" {
		return nil, fmt.Errorf("prefix: empty fingerprint: %w", ErrBadOptions)
	}
	if blockSize < 1 || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("prefix: block size %d outside [1, %d]: %w", blockSize, MaxBlockSize, ErrBadOptions)
	}
	h := sha256.New()
	h.Write([]byte(tagSeed))
	var buf [16]byte
	binary.LittleEndian.PutUint32(buf[0:], FormatVersion)
	binary.LittleEndian.PutUint32(buf[4:], uint32(blockSize))
	binary.LittleEndian.PutUint64(buf[8:], uint64(len(fingerprint)))
	h.Write(buf[:])
	h.Write([]byte(fingerprint))
	x := &Hasher{b: blockSize}
	h.Sum(x.seed[:0])
	return x, nil
}

// BlockSize returns B.
func (x *Hasher) BlockSize() int { return x.b }

// Seed returns h_0, the chain's start: the anchor of every state entry
// before the first full block.
func (x *Hasher) Seed() Key { return x.seed }

// Prompt hashes tokens into a chain of block keys. The tokens are copied.
func (x *Hasher) Prompt(tokens []int) *Prompt {
	p := &Prompt{x: x, chain: []Key{x.seed}}
	p.Append(tokens...)
	return p
}

// tokenWriter feeds token ids to a hash as little-endian int64s, the fixed
// encoding of every key.
type tokenWriter struct {
	buf [512]byte
}

func (w *tokenWriter) write(h hash.Hash, tokens []int) {
	for len(tokens) > 0 {
		n := min(len(tokens), len(w.buf)/8)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint64(w.buf[8*i:], uint64(int64(t)))
		}
		h.Write(w.buf[:8*n])
		tokens = tokens[n:]
	}
}

// Prompt is a token sequence with its block chain: h_0 = the seed, and
// h_{i+1} = SHA-256(tagBlock ‖ h_i ‖ tokens of block i) for every full
// block. It is not safe for concurrent mutation (Append); its read methods
// may be called concurrently.
type Prompt struct {
	x      *Hasher
	tokens []int
	chain  []Key // h_0 … h_m, m = len(tokens)/B
}

// Append extends the prompt (a turn's reply, the next turn's message) and
// hashes the blocks it completes.
func (p *Prompt) Append(tokens ...int) {
	p.tokens = append(p.tokens, tokens...)
	b := p.x.b
	if len(p.tokens)/b < len(p.chain) {
		return
	}
	h := sha256.New()
	var w tokenWriter
	for m := len(p.chain) - 1; (m+1)*b <= len(p.tokens); m++ {
		h.Reset()
		h.Write([]byte(tagBlock))
		h.Write(p.chain[m][:])
		w.write(h, p.tokens[m*b:(m+1)*b])
		var k Key
		h.Sum(k[:0])
		p.chain = append(p.chain, k)
	}
}

// Hasher returns the hasher the prompt was made with.
func (p *Prompt) Hasher() *Hasher { return p.x }

// Len returns the number of tokens n.
func (p *Prompt) Len() int { return len(p.tokens) }

// Blocks returns the number of full blocks m = ⌊n/B⌋.
func (p *Prompt) Blocks() int { return len(p.chain) - 1 }

// Chain returns h_i for 0 ≤ i ≤ Blocks(): the hash of the first i blocks,
// the anchor of the state entries at positions [iB, (i+1)B).
func (p *Prompt) Chain(i int) Key { return p.chain[i] }

// BlockKey returns the key of block i (positions [iB, (i+1)B)), which is
// h_{i+1}; 0 ≤ i < Blocks().
func (p *Prompt) BlockKey(i int) Key { return p.chain[i+1] }

// StateKey returns k(pos), the key of a state entry at position pos
// (0 ≤ pos ≤ Len()): SHA-256(tagState ‖ h_⌊pos/B⌋ ‖ tokens [⌊pos/B⌋·B, pos)).
func (p *Prompt) StateKey(pos int) Key {
	a := pos / p.x.b
	var s stateHasher
	s.reset(p.chain[a])
	s.write(p.tokens[a*p.x.b : pos])
	return s.sum()
}

// BlockMeta returns the key of block i and a Meta with its Kind, Pos,
// Anchor filled in; the caller sets Size, Saves and Sections.
func (p *Prompt) BlockMeta(i int) (Key, Meta) {
	return p.chain[i+1], Meta{Kind: KindBlock, Pos: (i + 1) * p.x.b, Anchor: p.chain[i]}
}

// StateMeta returns k(pos) and a Meta with its Kind, Pos, Tail and Anchor
// filled in; the caller sets Size, Saves, HasLogits and Sections.
func (p *Prompt) StateMeta(pos int) (Key, Meta) {
	a := pos / p.x.b
	return p.StateKey(pos), Meta{Kind: KindState, Pos: pos, Tail: pos - a*p.x.b, Anchor: p.chain[a]}
}

// stateHasher computes state keys of growing tails over one anchor
// incrementally: Sum does not disturb a SHA-256 state, so the keys of all
// tails at one anchor cost one pass over the longest.
type stateHasher struct {
	h hash.Hash
	w tokenWriter
}

func (s *stateHasher) reset(anchor Key) {
	if s.h == nil {
		s.h = sha256.New()
	}
	s.h.Reset()
	s.h.Write([]byte(tagState))
	s.h.Write(anchor[:])
}

func (s *stateHasher) write(tokens []int) { s.w.write(s.h, tokens) }

func (s *stateHasher) sum() Key {
	var k Key
	s.h.Sum(k[:0])
	return k
}
