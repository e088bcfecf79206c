package tokenizer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/k3go/k3/iox"
)

// File names read by [Load] and [LoadFS].
const (
	ModelFile  = "tiktoken.model"
	ConfigFile = "tokenizer_config.json"
)

// Size limits of the files; larger files are refused before being read.
const (
	maxModelSize  = 256 << 20
	maxConfigSize = 16 << 20
)

// Load reads a tokenizer from the directory dir: the vocabulary from
// tiktoken.model and the added tokens from tokenizer_config.json.
//
// tiktoken.model holds one token per line, "base64(bytes) rank": standard
// base64 with padding, split at the first space; CRLF line ends and blank
// lines are accepted. Ranks are taken from the file and must be distinct,
// as must the token bytes. Only "added_tokens_decoder" of
// tokenizer_config.json is used: each entry {"<id>": {"content": ...,
// "special": ...}} becomes an added token with that id; ids not listed get
// no token. Malformed input is reported as a [*FormatError] naming the file
// and line; files over 256 MiB (model) or 16 MiB (config) are refused.
func Load(dir string) (*Tokenizer, error) {
	if dir == "" {
		dir = "."
	}
	return load(regularDir(dir), func(name string) string { return filepath.Join(dir, name) })
}

// regularDir is a directory whose files are opened only if they are
// regular files (iox.OpenRegular: a FIFO named tiktoken.model would block
// the open forever, a device would never end).
type regularDir string

func (d regularDir) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, _, err := iox.OpenRegular(filepath.Join(string(d), filepath.FromSlash(name)))
	if err != nil {
		return nil, err
	}
	return f, nil
}

// LoadFS is [Load] reading tiktoken.model and tokenizer_config.json from the
// root of fsys (use [fs.Sub] for a subdirectory).
func LoadFS(fsys fs.FS) (*Tokenizer, error) {
	return load(fsys, func(name string) string { return name })
}

func load(fsys fs.FS, display func(string) string) (*Tokenizer, error) {
	mname, cname := display(ModelFile), display(ConfigFile)
	mdata, err := readLimited(fsys, ModelFile, mname, maxModelSize)
	if err != nil {
		return nil, err
	}
	cdata, err := readLimited(fsys, ConfigFile, cname, maxConfigSize)
	if err != nil {
		return nil, err
	}
	arena, toks, err := parseModel(mname, mdata)
	if err != nil {
		return nil, err
	}
	added, err := parseConfig(cname, cdata)
	if err != nil {
		return nil, err
	}
	return build(mname, arena, toks, cname, added)
}

func readLimited(fsys fs.FS, name, display string, limit int64) ([]byte, error) {
	// Stat first: opening a FIFO blocks until a writer appears.
	if st, err := fs.Stat(fsys, name); err == nil && !st.Mode().IsRegular() {
		return nil, &FormatError{File: display, Msg: fmt.Sprintf("not a regular file (%v)", st.Mode().Type())}
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	if size > limit {
		return nil, &FormatError{File: display, Msg: fmt.Sprintf("file is %d bytes, more than the limit of %d", size, limit)}
	}
	var buf bytes.Buffer
	if size >= 0 {
		buf.Grow(int(size) + 1)
	}
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("tokenizer: reading %s: %w", display, err)
	}
	if int64(buf.Len()) > limit {
		return nil, &FormatError{File: display, Msg: fmt.Sprintf("file is more than the limit of %d bytes", limit)}
	}
	return buf.Bytes(), nil
}

// parseModel parses tiktoken.model. The token bytes are decoded into one
// arena no larger than three quarters of data.
func parseModel(name string, data []byte) ([]byte, []rawTok, error) {
	ferr := func(line int, format string, args ...any) error {
		return &FormatError{File: name, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	arena := make([]byte, 0, base64.StdEncoding.DecodedLen(len(data)))
	toks := make([]rawTok, 0, bytes.Count(data, []byte{'\n'})+1)
	line := 0
	for len(data) > 0 {
		line++
		var l []byte
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			l, data = data[:nl], data[nl+1:]
		} else {
			l, data = data, nil
		}
		for len(l) > 0 && (l[len(l)-1] == ' ' || l[len(l)-1] == '\t' || l[len(l)-1] == '\r') {
			l = l[:len(l)-1]
		}
		if len(l) == 0 {
			continue
		}
		sp := bytes.IndexByte(l, ' ')
		if sp < 0 {
			return nil, nil, ferr(line, "no space between token and rank")
		}
		b64, rs := l[:sp], l[sp+1:]
		if len(b64) == 0 {
			return nil, nil, ferr(line, "empty token")
		}
		rank, ok := parseID(rs)
		if !ok {
			return nil, nil, ferr(line, "rank %q is not an integer in [0, %d]", truncate(rs), MaxID)
		}
		off := len(arena)
		n, ok := decodeBase64(arena[off:off+base64.StdEncoding.DecodedLen(len(b64))], b64)
		if !ok {
			return nil, nil, ferr(line, "token %q is not standard padded base64", truncate(b64))
		}
		if n == 0 || n > MaxTokenLen {
			return nil, nil, ferr(line, "token has length %d, want 1..%d", n, MaxTokenLen)
		}
		arena = arena[:off+n]
		toks = append(toks, rawTok{off: uint32(off), n: uint32(n), rank: uint32(rank), line: int32(min(line, 1<<31-1))})
	}
	return arena, toks, nil
}

// b64Value maps a standard base64 character to its value, others to 0xFF.
var b64Value = func() (t [256]byte) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for k := range t {
		t[k] = 0xFF
	}
	for k := range len(alphabet) {
		t[alphabet[k]] = byte(k)
	}
	return t
}()

// decodeBase64 decodes standard base64 with "=" padding into dst, which
// must hold len(src)/4*3 bytes. Unlike encoding/base64 it accepts no line
// breaks; like it (and Python) it ignores the unused bits of the last
// group.
func decodeBase64(dst, src []byte) (int, bool) {
	if len(src)%4 != 0 || len(src) == 0 {
		return 0, false
	}
	n := 0
	for len(src) > 4 {
		a, b, c, d := b64Value[src[0]], b64Value[src[1]], b64Value[src[2]], b64Value[src[3]]
		if a|b|c|d == 0xFF {
			return 0, false
		}
		dst[n], dst[n+1], dst[n+2] = a<<2|b>>4, b<<4|c>>2, c<<6|d
		n += 3
		src = src[4:]
	}
	a, b := b64Value[src[0]], b64Value[src[1]]
	if a|b == 0xFF {
		return 0, false
	}
	dst[n] = a<<2 | b>>4
	n++
	switch {
	case src[2] == '=' && src[3] == '=':
		return n, true
	case src[3] == '=':
		c := b64Value[src[2]]
		if c == 0xFF {
			return 0, false
		}
		dst[n] = b<<4 | c>>2
		return n + 1, true
	}
	c, d := b64Value[src[2]], b64Value[src[3]]
	if c|d == 0xFF {
		return 0, false
	}
	dst[n], dst[n+1] = b<<4|c>>2, c<<6|d
	return n + 2, true
}

// parseID parses a decimal id in [0, MaxID]: digits only, no sign.
func parseID(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= MaxID
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// parseConfig reads added_tokens_decoder from tokenizer_config.json. It
// streams through the JSON so that errors can name the line of the entry.
func parseConfig(name string, data []byte) ([]rawAdded, error) {
	// lineAt counts lines incrementally: offsets mostly increase, so the
	// total work stays linear in the size of data.
	lastOff, lastLine := 0, 1
	lineAt := func(off64 int64) int {
		off := int(min(max(off64, 0), int64(len(data))))
		if off < lastOff {
			lastOff, lastLine = 0, 1
		}
		lastLine += bytes.Count(data[lastOff:off], []byte{'\n'})
		lastOff = off
		return lastLine
	}
	// Validate first: a syntax error found by Unmarshal carries an offset
	// into data, which the streaming decoder's errors do not.
	if !json.Valid(data) {
		var se *json.SyntaxError
		if err := json.Unmarshal(data, new(json.RawMessage)); errors.As(err, &se) {
			return nil, &FormatError{File: name, Line: lineAt(se.Offset), Msg: se.Error()}
		}
		return nil, &FormatError{File: name, Msg: "invalid JSON"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	ferr := func(line int, format string, args ...any) error {
		if line == 0 {
			line = lineAt(dec.InputOffset())
		}
		return &FormatError{File: name, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	jerr := func(err error) error { return ferr(0, "%v", err) }
	delim := func(want json.Delim) error {
		tok, err := dec.Token()
		if err != nil {
			return jerr(err)
		}
		if d, ok := tok.(json.Delim); !ok || d != want {
			return ferr(0, "expected %q, found %v", want, tok)
		}
		return nil
	}
	if err := delim('{'); err != nil {
		return nil, err
	}
	var added []rawAdded
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jerr(err)
		}
		key, _ := tok.(string)
		if key != "added_tokens_decoder" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, jerr(err)
			}
			continue
		}
		if found {
			return nil, ferr(0, "added_tokens_decoder given twice")
		}
		found = true
		if err := delim('{'); err != nil {
			return nil, err
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, jerr(err)
			}
			line := lineAt(dec.InputOffset())
			key, _ := tok.(string)
			id, ok := parseID([]byte(key))
			if !ok || strconv.Itoa(id) != key {
				return nil, ferr(line, "added_tokens_decoder key %q is not a canonical id in [0, %d]", truncate([]byte(key)), MaxID)
			}
			var e struct {
				Content *string `json:"content"`
				Special bool    `json:"special"`
			}
			if err := dec.Decode(&e); err != nil {
				return nil, ferr(line, "added token %d: %v", id, err)
			}
			if e.Content == nil {
				return nil, ferr(line, "added token %d has no content", id)
			}
			added = append(added, rawAdded{AddedToken: AddedToken{ID: id, Content: *e.Content, Special: e.Special}, line: line})
		}
		if err := delim('}'); err != nil {
			return nil, err
		}
	}
	if err := delim('}'); err != nil {
		return nil, err
	}
	if !found {
		return nil, ferr(1, "no added_tokens_decoder")
	}
	return added, nil
}
