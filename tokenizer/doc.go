// Package tokenizer implements the Kimi K3 tokenizer: tiktoken-style
// byte-level BPE over the Kimi pre-tokenization pattern, with atomic added
// tokens.
//
// # Files
//
// [Load] reads a model directory's tiktoken.model (one "base64 rank" line
// per token; the ranks are the ids) and the added_tokens_decoder of
// tokenizer_config.json (special tokens such as "[BOS]" and "<|im_end|>",
// with literal ids). Nothing about a particular vocabulary is built in:
// rank counts and added ids come from the files. [LoadFS] reads from an
// [io/fs.FS] and [New] builds a tokenizer from memory.
//
// # Encoding
//
// [Tokenizer.Encode] finds added tokens first (the earliest match, the
// longest there; [EncodeOptions] can turn this off for untrusted text),
// splits the text between them into pre-tokens with a hand-written matcher
// equivalent to [Pattern], and merges each pre-token tiktoken-style by the
// rank of concatenated bytes. It never adds BOS or EOS and applies no chat
// template: callers format turns themselves with the ids from
// [Tokenizer.ID] or [Tokenizer.AddedTokens].
//
// Text is first cut as the release's tokenizer cuts it: into pieces of at
// most [MaxEncodeChars] code points, with no run of more than [MaxRunChars]
// consecutive whitespace or non-whitespace code points; each piece is
// encoded on its own ([EncodeOptions].NoCuts turns this off).
//
// Input is bytes. Invalid UTF-8 is encoded byte-exactly (each stray byte
// is classified as the Latin-1 code point of the same value), so
// Decode(Encode(x)) == x for every string x.
//
// # Unicode
//
// The character classes of the pattern (Han, letters by category, marks,
// numbers, White_Space) come from tables pinned at Unicode
// [UnicodeVersion], generated into tables.go by internal/ucd, not from the
// Go release's unicode package: Go 1.26's unicode.Han (Unicode 15.0.0)
// lacks CJK Extension I, which the reference tokenizer treats as Han.
//
// # Decoding
//
// [Tokenizer.Decode] concatenates token bytes and added-token contents and
// reports unknown ids with [ErrUnknownID]; [Tokenizer.DecodeLenient] skips
// them as the reference does. [StreamDecoder] decodes one id at a time
// without ever splitting a UTF-8 character.
//
// A [Tokenizer] is immutable and safe for concurrent use.
package tokenizer
