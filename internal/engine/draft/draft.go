// Package draft finds drafts for speculative decoding in text already
// seen: the longest earlier match of a sequence's suffix, in the sequence
// itself (Matcher) or in a bounded index of what the process generated
// lately (Index), and the tokens that followed the match there.
//
// Agents repeat themselves: file contents read back and edited, commands
// re-run with one flag changed, the same tool-call shapes turn after turn
// and session after session. The longer the match behind a draft, the
// likelier its tokens are right, so every draft comes with its Evidence
// (where the match was found and how long it is), which the engine's
// policy (internal/engine/specpolicy) turns into acceptance chances.
//
// A draft never changes the output: the engine verifies every drafted
// token against the model. Nothing here allocates per token once the
// tables have grown to the sequence.
package draft

// Source says where a draft's match was found.
type Source uint8

// The sources of a draft.
const (
	// None: no match, no draft.
	None Source = iota
	// Own: the sequence itself (its prompt and what it generated).
	Own
	// Shared: the process's index of recent outputs (Index).
	Shared
	// External: a drafter of the caller's (k3.Drafter) that gives no
	// evidence.
	External
	// NumSources counts the sources.
	NumSources
)

// Evidence is what a draft rests on: where its match was found and how
// many tokens of the sequence's suffix it matched (Match ≥ 1; 0 for an
// External draft).
type Evidence struct {
	Source Source
	Match  int
}

// Match is an earlier occurrence of a sequence's suffix: Len tokens end
// just before Pos, and Pos is where the tokens that followed them start
// (in the sequence for a Matcher, in the ring for an Index).
type Match struct {
	Pos, Len int
}

// MaxCompare bounds how far back a match is compared: a suffix matched
// over MaxCompare tokens counts as MaxCompare long. It bounds the work of
// a lookup (MaxChain candidates × MaxCompare tokens) on text that repeats
// a long stretch many times.
const MaxCompare = 256

// MaxChain bounds the earlier occurrences of the last two tokens a lookup
// compares, most recent first (as zlib bounds its hash chains).
const MaxChain = 64

// hash2 mixes two tokens into a table index.
func hash2(a, b int32, mask uint32) uint32 {
	h := uint32(a)*0x9E3779B1 ^ (uint32(b)+0x7F4A7C15)*0x85EBCA77
	h ^= h >> 15
	h *= 0x2C1B3C6D
	h ^= h >> 13
	return h & mask
}

// hash1 mixes one token into a table index.
func hash1(a int32, mask uint32) uint32 {
	h := uint32(a) * 0x9E3779B1
	h ^= h >> 16
	return h & mask
}

// Propose appends to dst up to max tokens that followed the longest
// earlier match of seq's suffix, found in the sequence (m, which must
// index exactly seq: Matcher.Sync) or in the shared index x (nil: none);
// the longer match wins, the sequence's own on a tie. It returns the draft
// and its evidence (Source None and no tokens when nothing matched).
func Propose(m *Matcher, x *Index, seq []int, max int, dst []int) ([]int, Evidence) {
	if max <= 0 || len(seq) == 0 {
		return dst, Evidence{}
	}
	own := m.Find()
	if x != nil {
		// The shared index is asked only when it could beat the sequence's
		// own match: a lookup takes its read lock.
		if own.Len < MaxCompare {
			out, mt := x.Draft(seq, own.Len, max, dst)
			if mt.Len > own.Len && len(out) > len(dst) {
				return out, Evidence{Source: Shared, Match: mt.Len}
			}
		}
	}
	if own.Len == 0 {
		return dst, Evidence{}
	}
	n := len(dst)
	dst = m.Continuation(own, max, dst)
	if len(dst) == n {
		return dst, Evidence{}
	}
	return dst, Evidence{Source: Own, Match: own.Len}
}
