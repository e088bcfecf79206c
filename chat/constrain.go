package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/tokenizer"
)

// Constrained answers. [AnswerGrammar] turns what a request asks of an
// answer (a response format, a tool choice, strict tools) into a grammar
// of the whole answer in the XTML format, for package grammar to enforce
// token by token:
//
//   - the think channel stays free: any text up to <|close|>, then the
//     channel's close and the response channel's opening are forced;
//   - with a response format, the response channel holds JSON (any
//     object for json_object, the schema's values for json_schema), then
//     the response's close, the message's close and <|end_of_msg|>;
//   - tool_choice "required" (or a named function) forces the tools
//     channel with at least one call, of a declared tool (or of the named
//     one, exactly once), right after the response channel opens (its
//     content is empty, as the APIs' forced calls have none); "none"
//     forbids the channel; "auto" leaves it optional;
//   - a call's arguments follow its function's parameters schema: one
//     typed argument element per property, in the declared order (the
//     required ones always), the type attribute matching the value, a
//     string written raw and any other value as JSON in Python's default
//     layout (", " and ": "). A strict function's schema must be fully
//     enforceable; a lenient one's is enforced as far as package grammar
//     can. Keys the schema does not declare are not generated when it
//     declares some.
//
// Limits: with a response format, an answer that calls tools has an
// empty content; the argument of an undeclared key is not generated
// (unless the schema declares none); a response format's JSON follows
// its own strict flag (default true, as the K3 API has it).

// ParseToolChoiceFunction reads the function a tool_choice object names
// ({"type": "function", "function": {"name": ...}}); it is "" for the
// string forms.
func ParseToolChoiceFunction(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return "", nil
	}
	var tc struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &tc); err != nil {
		return "", fmt.Errorf("chat: tool_choice: %w", err)
	}
	if tc.Function.Name == "" {
		return "", errors.New("chat: tool_choice: a function without a name")
	}
	return tc.Function.Name, nil
}

// GrammarVocab returns the vocabulary of tok for package grammar: the
// bytes of every ordinary token, and the added tokens as special tokens
// named by their content ("<|close|>" and so on). Build it once per
// tokenizer.
func GrammarVocab(tok *tokenizer.Tokenizer) (*grammar.Vocab, error) {
	n := tok.VocabSize()
	toks := make([][]byte, n)
	added := tok.AddedTokens()
	isAdded := make(map[int]bool, len(added))
	specials := make([]grammar.SpecialToken, 0, len(added))
	for _, a := range added {
		isAdded[a.ID] = true
		specials = append(specials, grammar.SpecialToken{ID: a.ID, Name: a.Content})
	}
	for id := range n {
		if isAdded[id] {
			continue
		}
		if b, ok := tok.TokenBytes(id); ok {
			toks[id] = b
		}
	}
	return grammar.NewVocab(toks, specials)
}

// ConstrainOptions configure [AnswerGrammar].
type ConstrainOptions struct {
	// Grammar sets the layout of the response's JSON and the depth of its
	// nesting; its Lenient is not used (each schema's strict flag
	// decides).
	Grammar grammar.Options
	// MaxToolCalls bounds the calls of the tools channel (0 means
	// DefaultMaxToolCalls). A named function is called once.
	MaxToolCalls int
	// Content, if not nil, is the grammar of the response channel's
	// content, in place of a response format's JSON (a regular
	// expression, say, which no response format expresses; the prompt
	// does not mention it). It cannot be combined with a response format.
	Content *grammar.Expr
}

// DefaultMaxToolCalls is the most calls in one answer when
// ConstrainOptions.MaxToolCalls is zero.
const DefaultMaxToolCalls = 8

// ErrConstraint is wrapped by the errors of requests whose constraints
// cannot be built: a tool choice naming an undeclared function, forced
// tools with none declared, a strict schema the grammar cannot enforce
// (those errors also wrap the *grammar.SchemaError).
var ErrConstraint = errors.New("chat: cannot constrain the answer")

// tool is a declared function tool.
type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
		Strict     *bool           `json:"strict"`
	} `json:"function"`
}

// declaredTools returns the function tools of opts and of system
// messages that declare tools.
func declaredTools(msgs []Message, opts Options) ([]tool, error) {
	var out []tool
	add := func(raw json.RawMessage) error {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || string(raw) == "null" {
			return nil
		}
		var ts []tool
		if err := json.Unmarshal(raw, &ts); err != nil {
			return fmt.Errorf("%w: tools: %v", ErrConstraint, err)
		}
		for _, t := range ts {
			if (t.Type == "" || t.Type == "function") && t.Function.Name != "" {
				out = append(out, t)
			}
		}
		return nil
	}
	if err := add(opts.Tools); err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.Role == RoleSystem {
			if err := add(m.Tools); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// AnswerGrammar returns the grammar of an assistant answer to the prompt
// Render(msgs, opts) ends with: what the model generates after it,
// through <|end_of_msg|>. It returns nil when opts and c constrain
// nothing (no response format or content grammar, tool_choice auto and no
// strict tool): the answer is
// then sampled freely, exactly as without this function.
func AnswerGrammar(msgs []Message, opts Options, c ConstrainOptions) (*grammar.Grammar, error) {
	if opts.NoGenerationPrompt {
		return nil, fmt.Errorf("%w: the prompt has no generation prompt", ErrConstraint)
	}
	tools, err := declaredTools(msgs, opts)
	if err != nil {
		return nil, err
	}
	choice := opts.ToolChoice
	if opts.ToolChoiceFunction != "" {
		choice = ToolChoiceRequired
	}
	switch choice {
	case "", ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
	default:
		return nil, fmt.Errorf("%w: tool_choice %q", ErrConstraint, choice)
	}
	var format *grammar.Expr
	if rf := opts.ResponseFormat; rf != nil && rf.Type != "" && rf.Type != "text" {
		e, err := responseExpr(opts, c.Grammar)
		if err != nil {
			return nil, err
		}
		format = &e
	}
	if c.Content != nil {
		if format != nil {
			return nil, fmt.Errorf("%w: a response format and a content grammar at once", ErrConstraint)
		}
		format = c.Content
	}
	anyStrict := false
	for _, t := range tools {
		if t.Function.Strict != nil && *t.Function.Strict {
			anyStrict = true
		}
	}
	if format == nil && (choice == "" || choice == ToolChoiceAuto) && !anyStrict {
		return nil, nil
	}

	// The tools channel, when it may or must come.
	var calls *grammar.Expr
	if choice != ToolChoiceNone && len(tools) > 0 {
		allowed := tools
		maxCalls := c.MaxToolCalls
		if maxCalls <= 0 {
			maxCalls = DefaultMaxToolCalls
		}
		if name := opts.ToolChoiceFunction; name != "" {
			allowed = nil
			for _, t := range tools {
				if t.Function.Name == name {
					allowed = append(allowed, t)
					break
				}
			}
			if len(allowed) == 0 {
				return nil, fmt.Errorf("%w: tool_choice names %q, which is not a declared tool", ErrConstraint, name)
			}
			maxCalls = 1
		}
		e, err := callsExpr(allowed, maxCalls, c.Grammar)
		if err != nil {
			return nil, err
		}
		calls = &e
	} else if choice == ToolChoiceRequired {
		return nil, fmt.Errorf("%w: tool_choice %q with no tools declared", ErrConstraint, choice)
	}

	closeResp := closeTag("response")
	endMsg := grammar.Seq(closeTag("message"), grammar.Special(TokEndOfMsg))
	var toolsChannel grammar.Expr
	if calls != nil {
		toolsChannel = grammar.Seq(openTag("tools"), *calls, closeTag("tools"))
	}
	var answer grammar.Expr
	switch {
	case choice == ToolChoiceRequired:
		// A forced call comes at once: the response channel is empty, as
		// in the APIs' forced tool calls (and a model cannot talk instead
		// of calling until it runs out of tokens).
		answer = grammar.Seq(closeResp, toolsChannel, endMsg)
	case format != nil && calls != nil:
		answer = grammar.Alt(
			grammar.Seq(*format, closeResp, endMsg),
			grammar.Seq(closeResp, toolsChannel, endMsg))
	case format != nil:
		answer = grammar.Seq(*format, closeResp, endMsg)
	case calls != nil:
		answer = grammar.Seq(grammar.Text(), closeResp, grammar.Optional(toolsChannel), endMsg)
	default:
		answer = grammar.Seq(grammar.Text(), closeResp, endMsg)
	}
	if opts.Thinking() {
		answer = grammar.Seq(grammar.Text(), closeTag("think"), openTag("response"), answer)
	}
	g, err := grammar.Compile(answer, grammar.Options{MaxDepth: c.Grammar.MaxDepth})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConstraint, err)
	}
	return g, nil
}

func openTag(name string) grammar.Expr {
	return grammar.Seq(grammar.Special(TokOpen), grammar.Bytes(name), grammar.Special(TokSep))
}

func closeTag(name string) grammar.Expr {
	return grammar.Seq(grammar.Special(TokClose), grammar.Bytes(name), grammar.Special(TokSep))
}

// responseExpr is the JSON of the response channel.
func responseExpr(opts Options, g grammar.Options) (grammar.Expr, error) {
	st := g.Style
	ws := grammar.Whitespace(st)
	switch opts.ResponseFormat.Type {
	case "json_object":
		s, err := grammar.ParseSchema([]byte(`{"type":"object"}`), grammar.Options{})
		if err != nil {
			return grammar.Expr{}, err
		}
		return grammar.Seq(ws, s.JSON(st), ws), nil
	case "json_schema":
	default:
		return grammar.Expr{}, fmt.Errorf("%w: response_format type %q", ErrConstraint, opts.ResponseFormat.Type)
	}
	schema, strict, err := responseFormatSchema(opts)
	if err != nil {
		return grammar.Expr{}, err
	}
	if schema == nil {
		schema = json.RawMessage("true")
	}
	s, err := grammar.ParseSchema(schema, grammar.Options{Lenient: !strict})
	if err != nil {
		return grammar.Expr{}, fmt.Errorf("%w: response_format.json_schema.schema: %w", ErrConstraint, err)
	}
	return grammar.Seq(ws, s.JSON(st), ws), nil
}

// responseFormatSchema finds the schema of a json_schema response format
// (as the renderer does) and its strict flag (default true).
func responseFormatSchema(opts Options) (json.RawMessage, bool, error) {
	var js struct {
		Schema     json.RawMessage `json:"schema"`
		Strict     *bool           `json:"strict"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if raw := bytes.TrimSpace(opts.ResponseFormat.JSONSchema); len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &js); err != nil {
			return nil, false, fmt.Errorf("%w: response_format.json_schema: %v", ErrConstraint, err)
		}
	}
	schema, strict := js.Schema, js.Strict
	if js.JSONSchema != nil && len(bytes.TrimSpace(schema)) == 0 {
		schema, strict = js.JSONSchema.Schema, js.JSONSchema.Strict
	}
	if s := bytes.TrimSpace(opts.ResponseSchema); len(s) > 0 && string(s) != "null" {
		schema = opts.ResponseSchema
	}
	if s := bytes.TrimSpace(schema); len(s) == 0 || string(s) == "null" {
		schema = nil
	}
	return schema, strict == nil || *strict, nil
}

// callsExpr is one to maxCalls calls of the allowed tools, numbered from
// 1.
func callsExpr(tools []tool, maxCalls int, g grammar.Options) (grammar.Expr, error) {
	args := make([]grammar.Expr, len(tools))
	for k, t := range tools {
		e, err := argumentsExpr(t)
		if err != nil {
			return grammar.Expr{}, err
		}
		args[k] = e
	}
	call := func(index int) grammar.Expr {
		alts := make([]grammar.Expr, len(tools))
		for k, t := range tools {
			alts[k] = grammar.Seq(
				grammar.Bytes(escapeAttr(t.Function.Name)+`" index="`+strconv.Itoa(index)+`"`),
				grammar.Special(TokSep), args[k], closeTag("call"))
		}
		return grammar.Seq(grammar.Special(TokOpen), grammar.Bytes(`call tool="`), grammar.Alt(alts...))
	}
	// call(1) [call(2) [call(3) ...]]: each index follows the one before.
	e := grammar.Seq()
	for k := maxCalls; k >= 1; k-- {
		if k == maxCalls {
			e = call(k)
		} else {
			e = grammar.Seq(call(k), grammar.Optional(e))
		}
	}
	return e, nil
}

// python is the layout of non-string argument values.
var python = grammar.Style{Python: true}

// xtmlTypes maps JSON Schema types to the type attribute of an argument.
var xtmlTypes = []struct{ schema, attr string }{
	{"string", "string"}, {"number", "number"}, {"integer", "number"},
	{"boolean", "boolean"}, {"null", "null"}, {"object", "object"}, {"array", "array"},
}

// argumentsExpr is the argument elements of a call of t.
func argumentsExpr(t tool) (grammar.Expr, error) {
	strict := t.Function.Strict != nil && *t.Function.Strict
	params := bytes.TrimSpace(t.Function.Parameters)
	if len(params) == 0 || string(params) == "null" {
		params = []byte(`{"type":"object","properties":{}}`)
	}
	s, err := grammar.ParseSchema(params, grammar.Options{Lenient: !strict})
	if err != nil {
		if strict {
			return grammar.Expr{}, fmt.Errorf("%w: tool %q: parameters: %w", ErrConstraint, t.Function.Name, err)
		}
		any, _ := grammar.ParseSchema([]byte(`true`), grammar.Options{})
		return genericArgs(any), nil
	}
	props, additional, ok := s.Properties()
	if !ok {
		if strict {
			return grammar.Expr{}, fmt.Errorf("%w: tool %q: parameters must be one object schema", ErrConstraint, t.Function.Name)
		}
		any, _ := grammar.ParseSchema([]byte(`true`), grammar.Options{})
		return genericArgs(any), nil
	}
	// Chain(i): the arguments from property i on; an optional property
	// may be left out.
	rest := grammar.Seq()
	if len(props) == 0 && additional != nil {
		rest = genericArgs(additional)
	}
	for k := len(props) - 1; k >= 0; k-- {
		p := props[k]
		arg := argumentExpr(grammar.Bytes(escapeAttr(p.Name)), p.Schema)
		with := grammar.Seq(arg, rest)
		if p.Required {
			rest = with
		} else {
			rest = grammar.Alt(with, rest)
		}
	}
	return rest, nil
}

// argumentExpr is one argument element: <|open|>argument key="KEY"
// type="T"<|sep|>VALUE<|close|>argument<|sep|>, with one alternative per
// type the schema allows.
func argumentExpr(key grammar.Expr, s *grammar.Schema) grammar.Expr {
	byAttr := map[string]bool{}
	var alts []grammar.Expr
	types := s.Types()
	for _, x := range xtmlTypes {
		if byAttr[x.attr] || !contains(types, x.schema) {
			continue
		}
		byAttr[x.attr] = true
		var value grammar.Expr
		if x.attr == "string" {
			value = s.OfType("string").RawString()
		} else {
			value = s.OfType(x.attr).JSON(python)
		}
		alts = append(alts, grammar.Seq(grammar.Bytes(x.attr+`"`), grammar.Special(TokSep), value, closeTag("argument")))
	}
	return grammar.Seq(grammar.Special(TokOpen), grammar.Bytes(`argument key="`), key, grammar.Bytes(`" type="`), grammar.Alt(alts...))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// genericArgs is any number of arguments with any keys and values valid
// under s.
func genericArgs(s *grammar.Schema) grammar.Expr {
	key := grammar.Regexp(`[^"&<>]+`)
	return grammar.Repeat(argumentExpr(key, s), 0, -1)
}
