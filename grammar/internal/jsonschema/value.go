package jsonschema

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

// Value is a parsed JSON value that keeps the order of object keys (a
// schema's properties come out in the order they are declared) and the
// literal of numbers.
type Value struct {
	Kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' boolean, 'z' null
	Str  string
	Keys []string
	Vals []*Value
}

// maxSchemaNesting bounds the nesting of a schema document.
const maxSchemaNesting = 512

func parseJSON(data []byte) (*Value, error) {
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

func decodeJV(d *json.Decoder, depth int) (*Value, error) {
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
			v := &Value{Kind: 'o'}
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
					v.Vals[i] = e // the last of a repeated key wins
					continue
				}
				v.Keys = append(v.Keys, k)
				v.Vals = append(v.Vals, e)
			}
			_, err := d.Token()
			return v, err
		case '[':
			v := &Value{Kind: 'a'}
			for d.More() {
				e, err := decodeJV(d, depth+1)
				if err != nil {
					return nil, err
				}
				v.Vals = append(v.Vals, e)
			}
			_, err := d.Token()
			return v, err
		}
	case string:
		return &Value{Kind: 's', Str: t}, nil
	case json.Number:
		return &Value{Kind: 'n', Str: string(t)}, nil
	case bool:
		return &Value{Kind: 'b', Str: strconv.FormatBool(t)}, nil
	case nil:
		return &Value{Kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected %v", t)
}

func (v *Value) index(k string) int {
	for i, x := range v.Keys {
		if x == k {
			return i
		}
	}
	return -1
}

func (v *Value) get(k string) *Value {
	if v == nil || v.Kind != 'o' {
		return nil
	}
	if i := v.index(k); i >= 0 {
		return v.Vals[i]
	}
	return nil
}

// rat returns a number's exact value.
func (v *Value) rat() *big.Rat {
	r, ok := new(big.Rat).SetString(v.Str)
	if !ok {
		return nil
	}
	return r
}

// jsonType is the JSON Schema type of a value ("integer" for a number
// with an integral value).
func (v *Value) jsonType() string {
	switch v.Kind {
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
func (v *Value) equal(w *Value) bool {
	if v.Kind != w.Kind {
		return false
	}
	switch v.Kind {
	case 'n':
		a, b := v.rat(), w.rat()
		return a != nil && b != nil && a.Cmp(b) == 0
	case 'a':
		if len(v.Vals) != len(w.Vals) {
			return false
		}
		for i := range v.Vals {
			if !v.Vals[i].equal(w.Vals[i]) {
				return false
			}
		}
		return true
	case 'o':
		if len(v.Keys) != len(w.Keys) {
			return false
		}
		for i, k := range v.Keys {
			x := w.get(k)
			if x == nil || !v.Vals[i].equal(x) {
				return false
			}
		}
		return true
	}
	return v.Str == w.Str
}

// Format writes v as JSON: compact, or in Python's json.dumps layout.
func (v *Value) Format(python bool) string {
	var b strings.Builder
	v.write(&b, python)
	return b.String()
}

func (v *Value) write(b *strings.Builder, python bool) {
	itemSep, keySep := ",", ":"
	if python {
		itemSep, keySep = ", ", ": "
	}
	switch v.Kind {
	case 'o':
		b.WriteByte('{')
		for i, k := range v.Keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			b.WriteString(QuoteJSON(k))
			b.WriteString(keySep)
			v.Vals[i].write(b, python)
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for i, e := range v.Vals {
			if i > 0 {
				b.WriteString(itemSep)
			}
			e.write(b, python)
		}
		b.WriteByte(']')
	case 's':
		b.WriteString(QuoteJSON(v.Str))
	case 'n', 'b':
		b.WriteString(v.Str)
	default:
		b.WriteString("null")
	}
}

// QuoteJSON writes s as a JSON string with the fewest escapes: quote,
// backslash and control characters; the rest as UTF-8.
func QuoteJSON(s string) string {
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
