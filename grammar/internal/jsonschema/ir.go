package jsonschema

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/k3go/k3/grammar/internal/automaton"
)

// Error reports a schema that is refused; package grammar turns it into
// its Error, field by field.
type Error struct {
	Pointer string // the JSON pointer of the keyword
	Keyword string // "" when the problem is not one keyword's
	Err     error  // automaton.ErrUnsupported or ErrInvalidSchema
	Msg     string
}

// ErrInvalidSchema is wrapped by an Error for a schema that is not valid
// JSON Schema or has no valid instance (package grammar exports it).
var ErrInvalidSchema = errors.New("invalid schema")

// Doc is a parsed schema document: its nodes by JSON pointer, and what a
// lenient schema ignores.
type Doc struct {
	root    *Value
	lenient bool
	byPtr   map[string]*Node
	ignored []string
	err     *Error
}

// Kind is what a Node is.
type Kind uint8

// Kinds of nodes.
const (
	KindPending Kind = iota // being parsed (a reference back to an ancestor)
	KindAny
	KindNone
	KindUnion
	KindRef
	KindEnum
	KindObject
	KindArray
	KindString
	KindNumber
	KindBool
	KindNull
)

// Node is a schema, or one typed branch of one.
type Node struct {
	Kind Kind
	Ptr  string
	// Inferred: the schema has no type keyword, and its types were
	// inferred from its keywords. Its values are generated in those
	// types; a validator accepts any other type too.
	Inferred bool
	Alts     []*Node
	Target   *Node
	Vals     []*Value
	Obj      *Object
	Arr      *Array
	Str      *String
	Num      *Number
}

// Object is the object branch of a schema.
type Object struct {
	Props []Prop
	Addl  *Node // nil: no other keys
}

// Prop is a declared (or required) property of an object.
type Prop struct {
	Name     string
	Schema   *Node
	Required bool
}

// Array is the array branch of a schema.
type Array struct {
	Prefix   []*Node
	Items    *Node // nil: none past the prefix
	Min, Max uint32
}

// String is the string branch of a schema: length bounds in code points
// and the automaton of its content.
type String struct {
	Min, Max uint32
	DFA      *automaton.DFA // nil: any content
}

// Number is the integer or number branch of a schema.
type Number struct {
	Integer        bool
	Lo, Hi         *big.Rat // nil: none
	LoExcl, HiExcl bool
	Mult           *big.Rat
}

// Parse parses a JSON Schema document, strict unless lenient.
func Parse(raw []byte, lenient bool) (*Doc, *Node, *Error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, nil, &Error{Err: ErrInvalidSchema, Msg: "not JSON: " + err.Error()}
	}
	d := &Doc{root: v, lenient: lenient, byPtr: map[string]*Node{}}
	n := d.node("", v)
	if d.err == nil {
		d.checkRefCycles()
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return d, n, nil
}

// Ignored lists the keywords a lenient schema has that are not enforced,
// as "pointer: keyword: why".
func (d *Doc) Ignored() []string { return slices.Clone(d.ignored) }

func (d *Doc) fail(ptr, kw string, err error, format string, args ...any) {
	if d.err == nil {
		d.err = &Error{Pointer: ptr, Keyword: kw, Err: err, Msg: fmt.Sprintf(format, args...)}
	}
}

// unsupported refuses a keyword in a strict schema, or notes it in a
// lenient one.
func (d *Doc) unsupported(ptr, kw, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if d.lenient {
		d.ignored = append(d.ignored, fmt.Sprintf("%s: %s: %s", PointerOf(ptr, kw), kw, msg))
		return
	}
	d.fail(PointerOf(ptr, kw), kw, automaton.ErrUnsupported, "%s", msg)
}

func (d *Doc) invalid(ptr, kw, format string, args ...any) {
	d.fail(PointerOf(ptr, kw), kw, ErrInvalidSchema, format, args...)
}

// PointerOf is the JSON pointer of keyword kw of the schema at ptr.
func PointerOf(ptr, kw string) string {
	if kw == "" {
		return ptr
	}
	return ptr + "/" + escapePointer(kw)
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
