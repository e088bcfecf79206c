package batchjob

import (
	"crypto/sha256"
	"encoding/json"
)

// groupKey names the header a request shares with others: its URL, model,
// tools and the instructions that come before the conversation (leading
// system and developer messages, a "system" or "instructions" field). With
// Options.GroupPrefixes, the requests of one group wait for the first of
// them to finish, so that the model's prefix cache holds the header when
// they start and it is prefilled once, not once per request in flight. A
// request with none of these has no group ("").
func (r *request) groupKey() string {
	var b struct {
		Model        string          `json:"model"`
		Tools        json.RawMessage `json:"tools"`
		System       json.RawMessage `json:"system"`
		Instructions json.RawMessage `json:"instructions"`
		Messages     []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(r.body, &b) != nil {
		return ""
	}
	h := sha256.New()
	write := func(s []byte) {
		var n [8]byte
		for i, l := 0, len(s); i < 8; i, l = i+1, l>>8 {
			n[i] = byte(l)
		}
		h.Write(n[:])
		h.Write(s)
	}
	write([]byte(r.url))
	write([]byte(b.Model))
	write(b.Tools)
	write(b.System)
	write(b.Instructions)
	lead := 0
	for _, m := range b.Messages {
		if m.Role != "system" && m.Role != "developer" {
			break
		}
		write([]byte(m.Role))
		write(m.Content)
		lead++
	}
	if len(b.Tools) == 0 && len(b.System) == 0 && len(b.Instructions) == 0 && lead == 0 {
		return ""
	}
	return string(h.Sum(nil))
}
