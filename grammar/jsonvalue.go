package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
)

// jv is a parsed JSON value that keeps the order of object keys (a
// schema's properties come out in the order they are declared) and the
// literal of numbers.
type jv struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' boolean, 'z' null
	str  string
	keys []string
	vals []*jv
}

// maxSchemaNesting bounds the nesting of a schema document.
const maxSchemaNesting = 512

func parseJSON(data []byte) (*jv, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeJV(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeJV(d *json.Decoder, depth int) (*jv, error) {
	if depth > maxSchemaNesting {
		return nil, fmt.Errorf("nested deeper than %d", maxSchemaNesting)
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jv{kind: 'o'}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				e, err := decodeJV(d, depth+1)
				if err != nil {
					return nil, err
				}
				if i := v.index(k); i >= 0 {
					v.vals[i] = e // the last of a repeated key wins
					continue
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, e)
			}
			_, err := d.Token()
			return v, err
		case '[':
			v := &jv{kind: 'a'}
			for d.More() {
				e, err := decodeJV(d, depth+1)
				if err != nil {
					return nil, err
				}
				v.vals = append(v.vals, e)
			}
			_, err := d.Token()
			return v, err
		}
	case string:
		return &jv{kind: 's', str: t}, nil
	case json.Number:
		return &jv{kind: 'n', str: string(t)}, nil
	case bool:
		return &jv{kind: 'b', str: strconv.FormatBool(t)}, nil
	case nil:
		return &jv{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected %v", t)
}

func (v *jv) index(k string) int {
	for i, x := range v.keys {
		if x == k {
			return i
		}
	}
	return -1
}

func (v *jv) get(k string) *jv {
	if v == nil || v.kind != 'o' {
		return nil
	}
	if i := v.index(k); i >= 0 {
		return v.vals[i]
	}
	return nil
}

// rat returns a number's exact value.
func (v *jv) rat() *big.Rat {
	r, ok := new(big.Rat).SetString(v.str)
	if !ok {
		return nil
	}
	return r
}

// jsonType is the JSON Schema type of a value ("integer" for a number
// with an integral value).
func (v *jv) jsonType() string {
	switch v.kind {
	case 'o':
		return "object"
	case 'a':
		return "array"
	case 's':
		return "string"
	case 'n':
		if r := v.rat(); r != nil && r.IsInt() {
			return "integer"
		}
		return "number"
	case 'b':
		return "boolean"
	}
	return "null"
}

// equal reports whether two values are equal as JSON Schema compares
// them (numbers by value, objects regardless of key order).
func (v *jv) equal(w *jv) bool {
	if v.kind != w.kind {
		return false
	}
	switch v.kind {
	case 'n':
		a, b := v.rat(), w.rat()
		return a != nil && b != nil && a.Cmp(b) == 0
	case 'a':
		if len(v.vals) != len(w.vals) {
			return false
		}
		for i := range v.vals {
			if !v.vals[i].equal(w.vals[i]) {
				return false
			}
		}
		return true
	case 'o':
		if len(v.keys) != len(w.keys) {
			return false
		}
		for i, k := range v.keys {
			x := w.get(k)
			if x == nil || !v.vals[i].equal(x) {
				return false
			}
		}
		return true
	}
	return v.str == w.str
}

// format writes v as JSON in style st (compact unless Python).
func (v *jv) format(st Style) string {
	var b strings.Builder
	v.write(&b, st)
	return b.String()
}

func (v *jv) write(b *strings.Builder, st Style) {
	itemSep, keySep := ",", ":"
	if st.Python {
		itemSep, keySep = ", ", ": "
	}
	switch v.kind {
	case 'o':
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			b.WriteString(quoteJSON(k))
			b.WriteString(keySep)
			v.vals[i].write(b, st)
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for i, e := range v.vals {
			if i > 0 {
				b.WriteString(itemSep)
			}
			e.write(b, st)
		}
		b.WriteByte(']')
	case 's':
		b.WriteString(quoteJSON(v.str))
	case 'n', 'b':
		b.WriteString(v.str)
	default:
		b.WriteString("null")
	}
}

// quoteJSON writes s as a JSON string with the fewest escapes: quote,
// backslash and control characters; the rest as UTF-8.
func quoteJSON(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
