package tokenizer

import "unicode/utf8"

// StreamDecoder decodes ids one at a time into text that never ends inside
// a UTF-8 character: bytes that may still begin a valid character are held
// back until the next id completes it or proves it invalid; invalid bytes
// are passed through as they are. The concatenation of everything Write
// and Flush return equals Decode of the same ids. A StreamDecoder is not
// safe for concurrent use.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte // an incomplete but so far valid UTF-8 prefix, at most 3 bytes
}

// NewStreamDecoder returns a StreamDecoder with nothing pending.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Write decodes id and returns the text it completes, which may be empty.
// An unknown id returns an error wrapping [ErrUnknownID] and leaves the
// decoder unchanged.
func (d *StreamDecoder) Write(id int) (string, error) {
	b, ok := d.t.v.bytesOf(id)
	if !ok {
		return "", unknownID(id, -1)
	}
	if len(d.pending) == 0 {
		k := len(b) - heldBack(b[max(0, len(b)-utf8.UTFMax):])
		d.pending = append(d.pending, b[k:]...)
		return b[:k], nil
	}
	d.pending = append(d.pending, b...)
	p := d.pending
	k := len(p) - heldBack(string(p[max(0, len(p)-utf8.UTFMax):]))
	out := string(p[:k])
	d.pending = append(p[:0], p[k:]...)
	return out, nil
}

// Flush returns the bytes held back, even if they do not form a complete
// character, and resets the decoder.
func (d *StreamDecoder) Flush() string {
	s := string(d.pending)
	d.pending = d.pending[:0]
	return s
}

// heldBack returns how many trailing bytes of s form an incomplete but so
// far valid UTF-8 sequence: bytes that a later token may still complete.
func heldBack(s string) int {
	n := len(s)
	for k := n - 1; k >= 0 && k > n-utf8.UTFMax; k-- {
		c := s[k]
		if c < utf8.RuneSelf {
			return 0
		}
		if c >= 0xC0 { // a lead byte, or a byte that is never valid
			if utf8.FullRuneInString(s[k:]) {
				return 0
			}
			return n - k
		}
	}
	return 0
}
