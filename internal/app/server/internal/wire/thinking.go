package wire

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"

	"github.com/k3go/k3/chat"
)

// Thinking is the K3 API's thinking option, as chat completions (and,
// as an extension, the Responses and Messages APIs) take it:
//
//	"thinking": {"type": "enabled" | "disabled", "keep": "all", "effort": "low" | "high" | "max"}
//
// or the booleans common clients send, true and false. type defaults to
// enabled. keep is the reasoning earlier turns keep in the prompt: the
// K3 API fixes it to "all", every earlier turn's reasoning, which is the
// release template's preserve_thinking and what the renderer does with
// thinking on; any other value is refused. effort is the thinking effort
// (the release template's thinking_effort). With thinking disabled, keep
// and effort are ignored, as the K3 API ignores them.
type Thinking struct {
	// Set reports that the request carried the option at all.
	Set bool
	// Off is thinking disabled.
	Off bool
	// Effort is low, high or max, or "" when none was given.
	Effort string
}

// thinkingKeys are the fields of the thinking object.
var thinkingKeys = []string{"type", "keep", "effort"}

// ParseThinking reads the thinking option at param ("thinking"). A field
// the object does not have is refused, as chat completions refuses what
// it does not implement. Every error names the field and what is
// allowed.
func ParseThinking(param string, raw json.RawMessage) (Thinking, *APIError) {
	raw = bytes.TrimSpace(raw)
	if IsNull(raw) {
		return Thinking{}, nil
	}
	switch string(raw) {
	case "true":
		return Thinking{Set: true}, nil
	case "false":
		return Thinking{Set: true, Off: true}, nil
	}
	var fields map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return Thinking{}, BadRequest(param, "", `%s must be true, false or an object {"type": "enabled" or "disabled", "keep": "all", "effort": "low", "high" or "max"}`, param)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !contains(thinkingKeys, k) {
			return Thinking{}, Unsupported(param+"."+k, "%s.%s is not supported (the thinking object takes %s)", param, k, strings.Join(thinkingKeys, ", "))
		}
	}
	th := Thinking{Set: true}
	typ, ok := optString(fields["type"])
	switch {
	case !ok:
		return Thinking{}, BadRequest(param+".type", "", `%s.type must be "enabled" or "disabled"`, param)
	case typ == "" || typ == "enabled":
	case typ == "disabled":
		th.Off = true
		return th, nil
	default:
		return Thinking{}, BadRequest(param+".type", "", `%s.type %q is not supported ("enabled" or "disabled")`, param, typ)
	}
	if e := CheckKeep(param+".keep", fields["keep"]); e != nil {
		return Thinking{}, e
	}
	var e *APIError
	th.Effort, e = ThinkingEffort(param+".effort", fields["effort"])
	return th, e
}

// CheckKeep checks the keep of an enabled thinking object (at param):
// absent, null or "all". K3 keeps the reasoning of every earlier turn in
// the prompt, the release template's preserve_thinking; the K3 API fixes
// keep to that, and so does this server.
func CheckKeep(param string, raw json.RawMessage) *APIError {
	keep, ok := optString(raw)
	if !ok || (keep != "" && keep != "all") {
		return BadRequest(param, "", `%s must be "all" (or left out): K3 keeps the reasoning of every earlier turn in the prompt (the release template's preserve_thinking)`, param)
	}
	return nil
}

// ThinkingEffort reads the effort of an enabled thinking object (at
// param): low, high or max (the release template's thinking_effort), or
// "" when absent.
func ThinkingEffort(param string, raw json.RawMessage) (string, *APIError) {
	effort, ok := optString(raw)
	switch {
	case !ok:
		return "", BadRequest(param, "", `%s must be "low", "high" or "max"`, param)
	case effort == "", effort == chat.EffortLow, effort == chat.EffortHigh, effort == chat.EffortMax:
		return effort, nil
	}
	return "", BadRequest(param, "", `%s %q is not supported ("low", "high" or "max")`, param, effort)
}

// optString reads an optional string: absent and null are "", anything
// but a string is not ok.
func optString(raw json.RawMessage) (string, bool) {
	if IsNull(raw) {
		return "", true
	}
	return RawString(raw)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CheckSchemaFormat checks the fields of a json_schema response format at
// param (chat completions' response_format.json_schema, Responses'
// text.format, Anthropic's output_config.format): schema is required and
// an object, strict a boolean, description a string, and with needName a
// name (a non-empty string) is required. The messages name the fields in
// the API's terms, never Go's.
func CheckSchemaFormat(param string, fields map[string]json.RawMessage, needName bool) *APIError {
	if needName {
		if name, ok := RawString(fields["name"]); !ok || name == "" {
			return BadRequest(param+".name", "", "%s.name is required: a non-empty string naming the schema", param)
		}
	}
	if s := bytes.TrimSpace(fields["schema"]); len(s) == 0 || s[0] != '{' || !json.Valid(s) {
		what := "is required"
		if !IsNull(s) {
			what = "must be an object"
		}
		return BadRequest(param+".schema", "", "%s.schema %s: the JSON Schema (an object) the reply must match", param, what)
	}
	if st := bytes.TrimSpace(fields["strict"]); !IsNull(st) && string(st) != "true" && string(st) != "false" {
		return BadRequest(param+".strict", "", "%s.strict must be true or false", param)
	}
	if d := fields["description"]; !IsNull(d) {
		if _, ok := RawString(d); !ok {
			return BadRequest(param+".description", "", "%s.description must be a string", param)
		}
	}
	return nil
}
