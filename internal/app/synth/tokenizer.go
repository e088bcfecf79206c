package synth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// AddedTokens are the added tokens of a generated tokenizer, in Kimi K3's
// layout: the first eight of the release's special tokens, at the
// release's offsets after the ranks ([BOS] +0, [EOS] +1, <|end_of_msg|>
// +2, <|open|> +3, <|close|> +4, <|sep|> +5, [start_header_id] +6,
// [end_header_id] +7). They take the last len(AddedTokens) ids of the
// vocabulary, in this order, and are all marked special. (The release has
// 256; a small synthetic vocabulary keeps the eight that chat needs.)
var AddedTokens = [...]string{"[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "[start_header_id]", "[end_header_id]"}

// EndOfMsg is the index in AddedTokens of <|end_of_msg|>, the stop token
// of a chat reply (generation_config.json's eos_token_id).
const EndOfMsg = 2

// GenerationConfigFile is the file GenerationConfig's content goes to.
const GenerationConfigFile = "generation_config.json"

// GenerationConfig returns generation_config.json for a generated
// tokenizer of vocab ids: eos_token_id is <|end_of_msg|>, as in the
// release.
func GenerationConfig(vocab int) []byte {
	return fmt.Appendf(nil, "{\n \"bos_token_id\": %d,\n \"eos_token_id\": %d\n}\n", vocab-len(AddedTokens), vocab-len(AddedTokens)+EndOfMsg)
}

// Vocabulary sizes GenerateTokenizer accepts: at least the 256 single
// bytes and the added tokens; at most what its merge list can fill.
const (
	MinTokenizerVocab = 256 + len(AddedTokens)
	MaxTokenizerVocab = 1 << 18
)

// maxMergeLen is the longest merged token, in bytes.
const maxMergeLen = 4

// TokenizerRanks returns the vocabulary of the generated tokenizer for a
// model with vocab token ids: the byte strings of ranks 0 to
// vocab-len(AddedTokens)-1. Ranks 0–255 are the single bytes in byte
// order; then come 2- to 4-byte merges learnt by byte-pair encoding from a
// built-in English and code text (most frequent pair first, so that
// rank order is merge order); then, when that text has no pair left that
// occurs twice, 2- to 4-byte strings of printable ASCII in a fixed order.
// The result depends on vocab alone.
func TokenizerRanks(vocab int) ([]string, error) {
	if vocab < MinTokenizerVocab || vocab > MaxTokenizerVocab {
		return nil, fmt.Errorf("synth: a generated tokenizer needs a vocabulary of %d to %d tokens, not %d",
			MinTokenizerVocab, MaxTokenizerVocab, vocab)
	}
	n := vocab - len(AddedTokens)
	ranks := make([]string, 0, n)
	have := make(map[string]bool, n)
	for b := range 256 {
		s := string([]byte{byte(b)})
		ranks = append(ranks, s)
		have[s] = true
	}
	add := func(s string) {
		if len(ranks) < n && !have[s] {
			ranks = append(ranks, s)
			have[s] = true
		}
	}
	for _, m := range learnMerges(n - len(ranks)) {
		add(m)
	}
	fillers(func(s string) bool {
		add(s)
		return len(ranks) < n
	})
	if len(ranks) < n {
		panic("synth: filler list too short") // MaxTokenizerVocab is below its length
	}
	return ranks, nil
}

// GenerateTokenizer returns the two files of the generated tokenizer for a
// vocabulary of vocab ids (see TokenizerRanks and AddedTokens):
// tiktoken.model ("base64 rank" lines) and tokenizer_config.json (the
// added tokens in added_tokens_decoder, as in the Kimi release).
func GenerateTokenizer(vocab int) (model, config []byte, err error) {
	ranks, err := TokenizerRanks(vocab)
	if err != nil {
		return nil, nil, err
	}
	var mb bytes.Buffer
	for r, s := range ranks {
		mb.WriteString(base64.StdEncoding.EncodeToString([]byte(s)))
		mb.WriteByte(' ')
		mb.WriteString(strconv.Itoa(r))
		mb.WriteByte('\n')
	}
	// The config is written by hand so that the ids come in numeric
	// order (encoding/json sorts map keys as strings).
	var cb bytes.Buffer
	cb.WriteString("{\n \"added_tokens_decoder\": {\n")
	for i, content := range AddedTokens {
		c, _ := json.Marshal(content)
		fmt.Fprintf(&cb, "  \"%d\": {\n   \"content\": %s,\n   \"lstrip\": false,\n   \"normalized\": false,\n   \"rstrip\": false,\n   \"single_word\": false,\n   \"special\": true\n  }",
			len(ranks)+i, c)
		if i < len(AddedTokens)-1 {
			cb.WriteByte(',')
		}
		cb.WriteByte('\n')
	}
	cb.WriteString(" },\n \"bos_token\": \"[BOS]\",\n \"eos_token\": \"[EOS]\",\n")
	fmt.Fprintf(&cb, " \"model_max_length\": %d,\n \"tokenizer_class\": \"TikTokenTokenizer\"\n}\n", 1<<20)
	return mb.Bytes(), cb.Bytes(), nil
}

// WriteTokenizer writes the generated tokenizer for vocab ids into dir
// (created if absent), replacing tiktoken.model, tokenizer_config.json and
// generation_config.json there.
func WriteTokenizer(dir string, vocab int) error {
	model, config, err := GenerateTokenizer(vocab)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	for _, f := range []smallFile{{tokenizerFiles[0], model}, {tokenizerFiles[1], config}, {GenerationConfigFile, GenerationConfig(vocab)}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	return nil
}

// learnMerges runs byte-pair encoding over the corpus's words and returns
// up to max merged strings of at most maxMergeLen bytes, in merge order.
// At each step it merges the adjacent pair with the highest count (the
// shorter, then the bytewise smaller concatenation on ties) and stops when
// no pair occurs twice.
func learnMerges(max int) []string {
	freq := map[string]int{}
	for _, w := range splitWords(corpus) {
		freq[w]++
	}
	words := make([]string, 0, len(freq))
	for w := range freq {
		words = append(words, w)
	}
	slices.Sort(words)
	seqs := make([][]string, len(words))
	counts := make([]int, len(words))
	for i, w := range words {
		counts[i] = freq[w]
		for k := range len(w) {
			seqs[i] = append(seqs[i], w[k:k+1])
		}
	}
	var out []string
	seen := map[string]bool{}
	pairs := map[string]int{}
	for len(out) < max {
		clear(pairs)
		for i, seq := range seqs {
			for k := 0; k+1 < len(seq); k++ {
				if m := seq[k] + seq[k+1]; len(m) <= maxMergeLen {
					pairs[m] += counts[i]
				}
			}
		}
		best, bestN := "", 1
		for m, c := range pairs {
			if seen[m] {
				continue
			}
			if c > bestN || (c == bestN && best != "" && (len(m) < len(best) || (len(m) == len(best) && m < best))) {
				best, bestN = m, c
			}
		}
		if best == "" {
			break
		}
		out = append(out, best)
		seen[best] = true
		for i, seq := range seqs {
			j := 0
			for k := 0; k < len(seq); k++ {
				if k+1 < len(seq) && len(seq[k])+len(seq[k+1]) == len(best) && seq[k]+seq[k+1] == best {
					seq[j] = best
					k++
				} else {
					seq[j] = seq[k]
				}
				j++
			}
			seqs[i] = seq[:j]
		}
	}
	return out
}

// splitWords cuts text into the pieces a pre-tokenizer would: an optional
// space followed by a run of letters, of digits (at most three) or of
// punctuation; and runs of other whitespace.
func splitWords(text string) []string {
	kind := func(c byte) int {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= 0x80:
			return 1
		case c >= '0' && c <= '9':
			return 2
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return 0
		}
		return 3
	}
	var out []string
	for i := 0; i < len(text); {
		j := i
		if text[j] == ' ' && j+1 < len(text) && kind(text[j+1]) != 0 {
			j++
		}
		k := kind(text[j])
		e := j + 1
		for e < len(text) && kind(text[e]) == k && !(k == 2 && e-j == 3) {
			e++
		}
		out = append(out, text[i:e])
		i = e
	}
	return out
}

// fillers calls yield with the filler strings in their fixed order until
// it returns false: two printable ASCII characters, then a space and two
// lowercase letters, three lowercase letters, a space and three lowercase
// letters, and four lowercase letters.
func fillers(yield func(string) bool) {
	const lower = "etaoinshrdlcumwfgypbvkjxqz"
	printable := " " + lower + "ETAOINSHRDLCUMWFGYPBVKJXQZ" + "0123456789" + ".,;:!?'\"-()[]{}<>/\\=+*&%$#@_|~^`"
	for _, a := range []byte(printable) {
		for _, b := range []byte(printable) {
			if !yield(string([]byte{a, b})) {
				return
			}
		}
	}
	var rec func(prefix []byte, n int) bool
	rec = func(prefix []byte, n int) bool {
		if n == 0 {
			return yield(string(prefix))
		}
		for _, c := range []byte(lower) {
			if !rec(append(prefix, c), n-1) {
				return false
			}
		}
		return true
	}
	for _, f := range []struct {
		prefix string
		n      int
	}{{" ", 2}, {"", 3}, {" ", 3}, {"", 4}} {
		if !rec([]byte(f.prefix), f.n) {
			return
		}
	}
}
