package wire

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/k3go/k3/chat"
)

// FunctionTool is a tool in chat completions' shape, the one the renderer
// declares; the other APIs' tools are translated into it.
type FunctionTool struct {
	Type     string         `json:"type"`
	Function FunctionSchema `json:"function"`
}

// FunctionSchema is a function tool's name, description and parameters.
type FunctionSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolsJSON returns tools as the renderer's JSON, nil for none.
func ToolsJSON(tools []FunctionTool) json.RawMessage {
	if len(tools) == 0 {
		return nil
	}
	b, _ := json.Marshal(tools) // only strings and raw JSON already validated
	return b
}

// EffortFor maps an effort name of the OpenAI or Anthropic API onto K3's
// three: minimal and low are low; medium and high are high; xhigh and max
// are max. ok is false for a name neither API has.
func EffortFor(name string) (effort string, ok bool) {
	switch name {
	case "minimal", "low":
		return chat.EffortLow, true
	case "medium", "high":
		return chat.EffortHigh, true
	case "xhigh", "max":
		return chat.EffortMax, true
	}
	return "", false
}

// reasoningPrefix marks the encrypted_content (Responses) and thinking
// signature (Messages) this server writes: K3's reasoning,
// base64-encoded, not encrypted. A client that keeps no state (store:
// false with include reasoning.encrypted_content, as Codex runs) gives it
// back, and the reasoning is rendered again exactly.
const reasoningPrefix = "k3-reasoning-v1:"

// EncodeReasoning is reasoning r as this server's opaque reasoning field.
func EncodeReasoning(r string) string {
	return reasoningPrefix + base64.StdEncoding.EncodeToString([]byte(r))
}

// DecodeReasoning reads what EncodeReasoning wrote; ok is false for
// anything else (another server's reasoning).
func DecodeReasoning(s string) (string, bool) {
	b64, ok := strings.CutPrefix(s, reasoningPrefix)
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	return string(b), err == nil
}
