package chat

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/k3go/k3/tokenizer"
)

// Delta is what one id of an answer adds: text of the reasoning or of the
// content, and a tool call once its call closes.
type Delta struct {
	Reasoning string
	Content   string
	ToolCall  *ToolCall
}

// Empty reports whether d adds nothing.
func (d Delta) Empty() bool { return d.Reasoning == "" && d.Content == "" && d.ToolCall == nil }

type channel uint8

const (
	chanNone channel = iota
	chanThink
	chanResponse
	chanArgument
)

const (
	endEOM = 1 + iota
	endEOS
	endClose
)

type tagMode uint8

const (
	inText tagMode = iota
	inOpen
	inClose
)

// Parser reads a model's answer one id at a time: the ids generated after
// a prompt from [Render]. Reasoning and content come out as deltas; a tool
// call comes out when its <|close|>call<|sep|> arrives. It stops at the
// message's close, at <|end_of_msg|> or at [EOS]; ids after that are
// ignored. Malformed input never fails: text outside any channel is
// dropped, unknown tags and other special tokens are ignored. A Parser is
// not safe for concurrent use.
type Parser struct {
	tok                        *tokenizer.Tokenizer
	open, close, sep, eom, eos int
	special                    map[int]bool
	dec                        *tokenizer.StreamDecoder

	mode        tagMode
	tag         strings.Builder
	channel     channel
	done        bool
	end         int // what ended the answer: 0 (not ended), endEOM, endEOS, endClose
	inTools     bool
	sawResponse bool

	msg      Message
	inCall   bool
	call     ToolCall
	args     value
	argKey   string
	argType  string
	argValue strings.Builder
}

// NewParser returns a parser for an answer to a prompt rendered with
// thinking on (the answer starts in the think channel) or off (in the
// response channel). The tokenizer must have the control tokens.
func NewParser(tok *tokenizer.Tokenizer, thinking bool) (*Parser, error) {
	p := &Parser{tok: tok, dec: tok.NewStreamDecoder(), special: map[int]bool{}, eos: -1}
	for _, x := range []struct {
		name string
		dst  *int
	}{{TokOpen, &p.open}, {TokClose, &p.close}, {TokSep, &p.sep}, {TokEndOfMsg, &p.eom}} {
		id, ok := tok.ID(x.name)
		if !ok {
			return nil, fmt.Errorf("chat: the tokenizer has no %s token", x.name)
		}
		*x.dst = id
	}
	if id, ok := tok.ID(TokEOS); ok {
		p.eos = id
	}
	for _, a := range tok.AddedTokens() {
		p.special[a.ID] = true
	}
	p.msg.Role = RoleAssistant
	p.channel = chanResponse
	if thinking {
		p.channel = chanThink
	}
	return p, nil
}

// StopIDs returns the ids an answer stops at: <|end_of_msg|> and, when the
// tokenizer has it, [EOS].
func StopIDs(tok *tokenizer.Tokenizer) []int {
	var ids []int
	for _, s := range []string{TokEndOfMsg, TokEOS} {
		if id, ok := tok.ID(s); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// Thinking reports whether the answer is in its think channel: what the
// next id adds is reasoning (or closes it). A server counts reasoning
// tokens with it.
func (p *Parser) Thinking() bool { return !p.done && p.channel == chanThink }

// Done reports whether the answer has ended: its message closed, or a stop
// token came.
func (p *Parser) Done() bool { return p.done }

// Message returns the answer so far: reasoning, content and the tool calls
// whose call has closed.
func (p *Parser) Message() Message {
	m := p.msg
	m.ToolCalls = append([]ToolCall(nil), p.msg.ToolCalls...)
	return m
}

// Write reads one id and returns what it adds. An id the tokenizer does
// not know is skipped.
func (p *Parser) Write(id int) Delta {
	var d Delta
	if p.done {
		return d
	}
	switch {
	case id == p.eom || id == p.eos:
		d = p.flush()
		p.done = true
		if p.end == 0 {
			p.end = endEOS
			if id == p.eom {
				p.end = endEOM
			}
		}
	case id == p.open || id == p.close:
		d = p.flush()
		p.tag.Reset()
		p.mode = inOpen
		if id == p.close {
			p.mode = inClose
		}
	case id == p.sep:
		d = p.flush()
		if p.mode != inText {
			d.ToolCall = p.endTag()
		}
	case p.special[id]:
	default:
		s, err := p.dec.Write(id)
		if err != nil {
			return d
		}
		p.text(s, &d)
	}
	return d
}

// Closing returns the segments that end the answer properly from where
// it stands, as the format closes a message: an unfinished tag, then the
// argument, call, tools and channel left open, the message's close and
// <|end_of_msg|>. An answer that ended at [EOS] is closed as if the [EOS]
// were not there. It is nil after <|end_of_msg|>. Closing finishes the
// parser (see Finish).
func (p *Parser) Closing() []Segment {
	p.Finish()
	r := &renderer{}
	switch p.end {
	case endEOM:
		return nil
	case endClose:
		r.special(TokEndOfMsg)
		return r.segs
	}
	if p.mode != inText {
		r.special(TokSep)
		p.endTag()
	}
	if p.channel == chanArgument {
		r.close("argument")
	}
	if p.inCall {
		r.close("call")
	}
	switch {
	case p.inTools:
		r.close("tools")
	case p.channel == chanThink:
		r.close("think")
		r.open("response")
		r.close("response")
	case p.channel == chanResponse:
		r.close("response")
	case !p.sawResponse:
		r.open("response")
		r.close("response")
	}
	r.endMessage()
	return r.segs
}

// CutCall is a tool call an answer stopped in the middle of (cut by a
// token limit): its ToolCall's Arguments are the JSON text so far, a
// prefix of the object the whole call's arguments would have been, as
// OpenAI returns a call cut by max_tokens.
type CutCall struct {
	ToolCall
	// Closed is what of the arguments is whole, as a JSON object: the
	// arguments that closed, and a string argument cut short with the
	// text it has; an argument of another type cut short is left out.
	Closed string
}

// Cut returns the tool call the answer was in when it stopped, once its
// call tag was complete (so its tool is known); ok is false when no call
// was open. Call it after Finish, which passes on the text held back.
func (p *Parser) Cut() (c CutCall, ok bool) {
	if !p.inCall {
		return CutCall{}, false
	}
	c.ToolCall = p.call
	c.ID = "call_" + strconv.Itoa(len(p.msg.ToolCalls))
	c.Type = "function"
	closed := p.args
	prefix := strings.TrimSuffix(p.args.format(outStyle), "}")
	if p.channel == chanArgument {
		if len(p.args.keys) > 0 {
			prefix += outStyle.itemSep
		}
		key := &value{kind: 's', str: p.argKey}
		prefix += key.format(outStyle) + outStyle.keySep
		text := p.argValue.String()
		if p.argType == "string" {
			v := &value{kind: 's', str: text}
			quoted := v.format(outStyle)
			prefix += quoted[:len(quoted)-1] // no closing quote: the string was cut
			closed.keys = append(closed.keys[:len(closed.keys):len(closed.keys)], p.argKey)
			closed.vals = append(closed.vals[:len(closed.vals):len(closed.vals)], v)
		} else {
			prefix += text
		}
	}
	c.Function.Arguments = prefix
	c.Closed = closed.format(outStyle)
	return c, true
}

// Finish ends the answer and returns the text still held back (an
// incomplete UTF-8 character). A call that never closed is not in
// Message (see Cut).
func (p *Parser) Finish() Delta {
	d := p.flush()
	p.done = true
	return d
}

// flush passes on the bytes the decoder holds back.
func (p *Parser) flush() Delta {
	var d Delta
	if s := p.dec.Flush(); s != "" {
		p.text(s, &d)
	}
	return d
}

func (p *Parser) text(s string, d *Delta) {
	if s == "" {
		return
	}
	if p.mode != inText {
		p.tag.WriteString(s)
		return
	}
	switch p.channel {
	case chanThink:
		p.msg.ReasoningContent += s
		d.Reasoning += s
	case chanResponse:
		p.msg.Content += s
		d.Content += s
	case chanArgument:
		p.argValue.WriteString(s)
	}
}

// endTag acts on the tag just closed by <|sep|>; it returns a tool call
// that closed.
func (p *Parser) endTag() *ToolCall {
	mode := p.mode
	p.mode = inText
	name, attrs := parseTag(p.tag.String())
	if mode == inClose {
		switch name {
		case "think", "response":
			p.channel = chanNone
		case "argument":
			if p.channel == chanArgument && p.inCall {
				p.endArgument()
			}
			p.channel = chanNone
		case "call":
			if !p.inCall {
				return nil
			}
			p.inCall = false
			p.call.Function.Arguments = p.args.format(outStyle)
			p.call.ID = "call_" + strconv.Itoa(len(p.msg.ToolCalls))
			p.call.Type = "function"
			p.msg.ToolCalls = append(p.msg.ToolCalls, p.call)
			c := p.call
			return &c
		case "tools":
			p.inTools = false
		case "message":
			p.done = true
			p.end = endClose
		}
		return nil
	}
	switch name {
	case "think":
		p.channel = chanThink
	case "response":
		p.channel = chanResponse
		p.sawResponse = true
	case "tools":
		p.channel = chanNone
		p.inTools = true
	case "call":
		p.inCall = true
		p.call = ToolCall{Function: FunctionCall{Name: attrs["tool"]}}
		p.args = value{kind: 'o'}
		p.channel = chanNone
	case "argument":
		if p.inCall {
			p.channel = chanArgument
			p.argKey, p.argType = attrs["key"], attrs["type"]
			p.argValue.Reset()
		}
	}
	return nil
}

// endArgument adds the argument just read to the call: a string as it is,
// any other type as the JSON it holds (as a string if it is not JSON).
func (p *Parser) endArgument() {
	s := p.argValue.String()
	v := &value{kind: 's', str: s}
	if p.argType != "string" {
		if j, err := parseValue([]byte(s)); err == nil {
			v = j
		}
	}
	for i, k := range p.args.keys {
		if k == p.argKey {
			p.args.vals[i] = v
			return
		}
	}
	p.args.keys = append(p.args.keys, p.argKey)
	p.args.vals = append(p.args.vals, v)
}

// parseTag splits `NAME KEY="VALUE" ...` into the name and unescaped
// attributes; it tolerates anything.
func parseTag(s string) (string, map[string]string) {
	name, rest, _ := strings.Cut(s, " ")
	attrs := map[string]string{}
	for {
		rest = strings.TrimLeft(rest, " ")
		k, after, ok := strings.Cut(rest, `="`)
		if !ok {
			return name, attrs
		}
		v, after2, ok := strings.Cut(after, `"`)
		if !ok {
			v, after2 = after, ""
		}
		attrs[k] = unescapeAttr(v)
		rest = after2
	}
}

func unescapeAttr(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	return strings.NewReplacer("&quot;", `"`, "&amp;", "&").Replace(s)
}

// Parse reads a whole answer: the ids generated after a prompt rendered
// with thinking on or off, up to and including a stop token if there is
// one. An answer cut off mid-reasoning has only reasoning.
func Parse(tok *tokenizer.Tokenizer, ids []int, thinking bool) (Message, error) {
	p, err := NewParser(tok, thinking)
	if err != nil {
		return Message{}, err
	}
	for _, id := range ids {
		p.Write(id)
		if p.Done() {
			break
		}
	}
	p.Finish()
	return p.Message(), nil
}
