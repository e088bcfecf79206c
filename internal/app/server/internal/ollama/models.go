package ollama

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Model describes the served model for the listings (/api/tags,
// /api/show, /api/ps).
type Model struct {
	// Name is the server's --name; the listings give it with its tag.
	Name string
	// Loaded is when the server loaded it (Ollama's modified_at).
	Loaded time.Time
	// Fingerprint identifies the checkpoint's configuration; the digest
	// is its SHA-256 with the name.
	Fingerprint string
	// ContextLength is the server's context (--max-context), the most a
	// request's prompt and reply hold.
	ContextLength int
	// ResidentBytes is what the model's memory plan uses (Ollama's size
	// of a loaded model; size_vram is 0: k3 runs on the CPU).
	ResidentBytes int64
	// The configuration model_info reports, under "kimi_k3.".
	Layers, Hidden, Vocab, Experts, ExpertsUsed, Heads int
}

// details is Ollama's ModelDetails.
type details struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// family is the architecture name the listings give: the config's
// model_type, as Ollama names an architecture after its converter's.
const family = "kimi_k3"

func (m *Model) details() details {
	return details{Format: "safetensors", Family: family, Families: []string{family}, QuantizationLevel: "MXFP4"}
}

func (m *Model) digest() string {
	h := sha256.Sum256([]byte(m.Name + "\x00" + m.Fingerprint))
	return hex.EncodeToString(h[:])
}

// capabilities are what the model does here: Ollama's clients look for
// "tools" before sending tools and "thinking" before sending think.
var capabilities = []string{"completion", "tools", "thinking"}

// Tags is the answer to GET /api/tags: the one model.
func (m *Model) Tags() any {
	type entry struct {
		Name         string    `json:"name"`
		Model        string    `json:"model"`
		ModifiedAt   time.Time `json:"modified_at"`
		Size         int64     `json:"size"`
		Digest       string    `json:"digest"`
		Details      details   `json:"details"`
		Capabilities []string  `json:"capabilities"`
	}
	name := TaggedName(m.Name)
	return map[string]any{"models": []entry{{Name: name, Model: name, ModifiedAt: m.Loaded, Size: m.ResidentBytes,
		Digest: m.digest(), Details: m.details(), Capabilities: capabilities}}}
}

// PS is the answer to GET /api/ps: the model, loaded while the server
// runs (expires_at is a year ahead: it never unloads on its own).
func (m *Model) PS(now time.Time) any {
	type entry struct {
		Name          string    `json:"name"`
		Model         string    `json:"model"`
		Size          int64     `json:"size"`
		Digest        string    `json:"digest"`
		Details       details   `json:"details"`
		ExpiresAt     time.Time `json:"expires_at"`
		SizeVRAM      int64     `json:"size_vram"`
		ContextLength int       `json:"context_length"`
	}
	name := TaggedName(m.Name)
	return map[string]any{"models": []entry{{Name: name, Model: name, Size: m.ResidentBytes, Digest: m.digest(), Details: m.details(),
		ExpiresAt: now.UTC().AddDate(1, 0, 0), ContextLength: m.ContextLength}}}
}

// Show is the answer to POST /api/show: details, model_info (the
// architecture and its sizes, the context the server holds as
// kimi_k3.context_length, where clients read a model's context) and
// capabilities. There is no template or Modelfile: k3 renders Kimi K3's
// chat format itself.
func (m *Model) Show() any {
	return map[string]any{
		"modelfile":  "# k3 serve: Kimi K3 in its own chat format; there is no Modelfile\nFROM " + m.Name + "\n",
		"parameters": "temperature 0.8\ntop_k 40\ntop_p 0.9",
		"details":    m.details(),
		"model_info": map[string]any{
			"general.architecture":             family,
			family + ".context_length":         m.ContextLength,
			family + ".block_count":            m.Layers,
			family + ".embedding_length":       m.Hidden,
			family + ".vocab_size":             m.Vocab,
			family + ".expert_count":           m.Experts,
			family + ".expert_used_count":      m.ExpertsUsed,
			family + ".attention.head_count":   m.Heads,
			"general.quantization_description": "routed experts MXFP4, the rest BF16",
		},
		"capabilities": capabilities,
		"modified_at":  m.Loaded,
	}
}
