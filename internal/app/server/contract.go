package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// The K3 API contract's checks of a chat completions request, made before
// anything is rendered or tokenized (Moonshot's Kimi Vendor Verifier
// checks them; docs/K3-API.md): tools and dynamic tools, tool results,
// response_format. Each refusal is a 400 whose param and message name the
// field in the API's terms and say what is allowed.

// dynamicToolName is the K3 API's rule for a tool's name:
// ^[a-zA-Z_][a-zA-Z0-9-_]{2,63}$ (Moonshot's tool-use documentation).
var dynamicToolName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_-]{2,63}$`)

// toolNames remembers the tools declared so far, request-level and
// dynamic: two with one name are refused.
type toolNames map[string]string // name -> the param that declared it

// checkTools checks a tools array at param: request-level (dynamic
// false) or a system message's dynamic tools. Each is {"type":
// "function", "function": {"name", "description", "parameters",
// "strict"}}; a dynamic tool's name follows the K3 API's rule. It
// returns how many tools the array declares.
func checkTools(param string, raw json.RawMessage, dynamic bool, names toolNames) (int, *wire.APIError) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || bytes.TrimSpace(raw)[0] != '[' {
		return 0, wire.BadRequest(param, "", `%s must be an array of tools ({"type": "function", "function": {"name": ...}})`, param)
	}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", param, i)
		fields, ok := object(item)
		if !ok {
			return 0, wire.BadRequest(p, "", `%s must be a tool object {"type": "function", "function": {"name", "description", "parameters"}}`, p)
		}
		if e := onlyKeys(p, fields, "type", "function"); e != nil {
			return 0, e
		}
		typ, ok := wire.RawString(fields["type"])
		switch {
		case wire.IsNull(fields["type"]):
			return 0, wire.BadRequest(p+".type", "", `%s.type is required: "function"`, p)
		case !ok || typ != "function":
			return 0, wire.BadRequest(p+".type", "", `%s.type %s is not supported: "function" is the one tool type`, p, fields["type"])
		}
		fn, ok := object(fields["function"])
		if !ok {
			return 0, wire.BadRequest(p+".function", "", `%s.function is required: an object {"name", "description", "parameters", "strict"}`, p)
		}
		fp := p + ".function"
		if e := onlyKeys(fp, fn, "name", "description", "parameters", "strict"); e != nil {
			return 0, e
		}
		name, ok := wire.RawString(fn["name"])
		switch {
		case !ok || name == "":
			return 0, wire.BadRequest(fp+".name", "", "%s.name is required: a non-empty string", fp)
		case dynamic && !dynamicToolName.MatchString(name):
			return 0, wire.BadRequest(fp+".name", "", "%s.name %q is not a valid tool name: a letter or _ first, then letters, digits, _ or -, 3 to 64 characters in all", fp, name)
		}
		if first, dup := names[name]; dup {
			return 0, wire.BadRequest(fp+".name", "", "%s.name: two tools are named %q (%s and %s); tool names must be unique across tools and dynamic tools", fp, name, first, p)
		}
		names[name] = p
		if d := fn["description"]; !wire.IsNull(d) {
			if _, ok := wire.RawString(d); !ok {
				return 0, wire.BadRequest(fp+".description", "", "%s.description must be a string", fp)
			}
		}
		if pr := fn["parameters"]; !wire.IsNull(pr) {
			if _, ok := object(pr); !ok {
				return 0, wire.BadRequest(fp+".parameters", "", "%s.parameters must be a JSON Schema object", fp)
			}
		}
		if st := fn["strict"]; !wire.IsNull(st) && !isBool(st) {
			return 0, wire.BadRequest(fp+".strict", "", "%s.strict must be true or false", fp)
		}
	}
	return len(items), nil
}

// checkMessages checks what the contract asks of the messages: a tool
// result names the call it answers (tool_call_id); tools inside a
// message (dynamic tools) only in a system message whose content is
// empty, each a full tool definition. It returns how many tools the
// messages declare.
func checkMessages(msgs []chat.Message, names toolNames) (int, *wire.APIError) {
	n := 0
	for i, m := range msgs {
		p := wire.ItemParam("messages", i)
		if m.Role == chat.RoleTool && m.ToolCallID == "" {
			return 0, wire.BadRequest(p+".tool_call_id", "", "%s.tool_call_id is required: a tool message answers the tool call with that id", p)
		}
		if wire.IsNull(m.Tools) {
			continue
		}
		if m.Role != chat.RoleSystem {
			return 0, wire.BadRequest(p+".tools", "", "%s.tools: dynamic tools are allowed in a system message only, not in a %s message", p, m.Role)
		}
		if m.Text() != "" {
			return 0, wire.BadRequest(p+".content", "", "%s.content must be empty in a system message that declares tools (dynamic tools): send its text in a message of its own", p)
		}
		k, e := checkTools(p+".tools", m.Tools, true, names)
		if e != nil {
			return 0, e
		}
		n += k
	}
	return n, nil
}

// checkResponseFormat checks response_format: a type of text,
// json_object or json_schema; json_schema needs its json_schema object
// with a name and a schema (an object), strict a boolean.
func checkResponseFormat(rf *chat.ResponseFormat) *wire.APIError {
	if rf == nil {
		return nil
	}
	switch rf.Type {
	case "text", "json_object":
		return nil
	case "json_schema":
	case "":
		return wire.BadRequest("response_format.type", "", `response_format.type is required: "text", "json_object" or "json_schema"`)
	default:
		return wire.BadRequest("response_format.type", "", `response_format.type %q is not supported ("text", "json_object" or "json_schema")`, rf.Type)
	}
	const param = "response_format.json_schema"
	js, ok := object(rf.JSONSchema)
	if !ok {
		return wire.BadRequest(param, "", `%s is required with type "json_schema": an object {"name", "schema", "strict", "description"}`, param)
	}
	if e := onlyKeys(param, js, "name", "schema", "strict", "description"); e != nil {
		return e
	}
	return wire.CheckSchemaFormat(param, js, true)
}

// object reads a JSON object's fields; ok is false for anything else.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	return m, json.Unmarshal(raw, &m) == nil
}

func isBool(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "true" || s == "false"
}

// onlyKeys refuses a field of the object at param that is not one of
// keys: chat completions refuses what it does not implement.
func onlyKeys(param string, fields map[string]json.RawMessage, keys ...string) *wire.APIError {
	var extra []string
	for k := range fields {
		if !contains(keys, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	return wire.Unsupported(param+"."+extra[0], "%s.%s is not supported (%s takes %s)", param, extra[0], param, strings.Join(keys, ", "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
