package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// value is a JSON value that keeps the order of object keys and the
// literal of numbers, as Python's json module does when the release
// renders it.
type value struct {
	kind byte   // 'o' object, 'a' array, 's' string, 'n' number, 'b' boolean, 'z' null
	str  string // a string, a number literal, or "true"/"false"
	keys []string
	vals []*value // object values (parallel to keys) or array elements
}

// parseValue parses one JSON value. A repeated object key keeps its first
// position and its last value, as a Python dict does.
func parseValue(data []byte) (*value, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (*value, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &value{kind: 'o'}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				e, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				if i := slices.Index(v.keys, k); i >= 0 {
					v.vals[i] = e
					continue
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, e)
			}
			_, err := d.Token()
			return v, err
		case '[':
			v := &value{kind: 'a'}
			for d.More() {
				e, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				v.vals = append(v.vals, e)
			}
			_, err := d.Token()
			return v, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		return &value{kind: 's', str: t}, nil
	case json.Number:
		return &value{kind: 'n', str: string(t)}, nil
	case bool:
		return &value{kind: 'b', str: strconv.FormatBool(t)}, nil
	case nil:
		return &value{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// typeName is the type attribute of an argument of this value.
func (v *value) typeName() string {
	switch v.kind {
	case 'o':
		return "object"
	case 'a':
		return "array"
	case 's':
		return "string"
	case 'n':
		return "number"
	case 'b':
		return "boolean"
	}
	return "null"
}

// style is a way of writing JSON, as Python's json.dumps options choose.
type style struct {
	itemSep, keySep string
	sortKeys        bool
	ascii           bool // ensure_ascii: escape every non-ASCII code point
}

// The release renders JSON with ensure_ascii=False: non-ASCII text stays
// as it is, and its tokens are those of the text (an escape would cost
// several tokens per character and is not what the model read in
// training).
var (
	// pyDefault is json.dumps(v, ensure_ascii=False): ", " and ": ", keys
	// in order (a call's typed arguments).
	pyDefault = style{itemSep: ", ", keySep: ": "}
	// pyCompactSorted is json.dumps(v, ensure_ascii=False,
	// separators=(",", ":"), sort_keys=True) (tool declarations, schemas).
	pyCompactSorted = style{itemSep: ",", keySep: ":", sortKeys: true}
	// outStyle writes parsed arguments: Python's separators, UTF-8 kept.
	outStyle = style{itemSep: ", ", keySep: ": "}
)

func (v *value) format(st style) string {
	var b strings.Builder
	v.write(&b, st)
	return b.String()
}

func (v *value) write(b *strings.Builder, st style) {
	switch v.kind {
	case 'o':
		order := make([]int, len(v.keys))
		for i := range order {
			order[i] = i
		}
		if st.sortKeys {
			slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(v.keys[i], v.keys[j]) })
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(st.itemSep)
			}
			writeString(b, v.keys[i], st.ascii)
			b.WriteString(st.keySep)
			v.vals[i].write(b, st)
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for n, e := range v.vals {
			if n > 0 {
				b.WriteString(st.itemSep)
			}
			e.write(b, st)
		}
		b.WriteByte(']')
	case 's':
		writeString(b, v.str, st.ascii)
	case 'n':
		b.WriteString(pyNumber(v.str))
	case 'b':
		b.WriteString(v.str)
	default:
		b.WriteString("null")
	}
}

// pyNumber writes a JSON number literal as Python does after json.loads:
// an integer literal stays an integer (arbitrary precision), any other
// becomes a float written by repr.
func pyNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		if strings.TrimLeft(lit, "-0") == "" {
			return "0" // -0 is the integer 0
		}
		return lit
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !math.IsInf(f, 0) {
		return lit
	}
	return pyFloat(f)
}

// pyFloat is Python's repr of a float: the shortest digits that round
// trip, in positional notation for exponents -4..15 (with ".0" when
// integral), scientific otherwise, as json.dumps writes them.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		switch {
		case exp < 0:
			out = "0." + strings.Repeat("0", -exp-1) + digits
		case exp+1 >= len(digits):
			out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
		default:
			out = digits[:exp+1] + "." + digits[exp+1:]
		}
	} else {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// writeString writes s as a JSON string as Python's json.dumps does:
// named escapes for \b \f \n \r \t, \u00XX for other control characters,
// and with ascii every non-ASCII code point as \uXXXX (a surrogate pair
// above U+FFFF). Invalid UTF-8 becomes U+FFFD.
func writeString(b *strings.Builder, s string, ascii bool) {
	const hex = "0123456789abcdef"
	u := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&15])
		b.WriteByte(hex[r>>8&15])
		b.WriteByte(hex[r>>4&15])
		b.WriteByte(hex[r&15])
	}
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
			u(r)
		case r < utf8.RuneSelf || !ascii:
			b.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			u(0xD800 + r>>10)
			u(0xDC00 + r&0x3FF)
		default:
			u(r)
		}
	}
	b.WriteByte('"')
}
