package server

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestAccessLogCacheKey: the access log's cache_key is what a router in
// front of several servers hashes on (docs/SCALING.md): the body's
// prompt_cache_key (Responses and chat completions, which OpenAI's chat
// API has too), else the headers the real agents send (Codex CLI's
// session-id, Claude Code's X-Claude-Code-Session-Id) or k3's own
// X-K3-Cache-Key, in the order docs/nginx/k3.conf reads them.
func TestAccessLogCacheKey(t *testing.T) {
	records := make(chan slog.Record, 64)
	_, ts, _ := newScripted(t, Options{Logger: slog.New(recordHandler(records))}, nil)
	const (
		responses = `{"input":"hi","reasoning":{"effort":"none"},"max_output_tokens":1,"store":false`
		chatBody  = `{"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"disabled"},"max_tokens":1`
		messages  = `{"model":"k3-test","max_tokens":1,"messages":[{"role":"user","content":"hi"}]`
	)
	long := strings.Repeat("k", 1000)
	for _, c := range []struct {
		name, path, body string
		header           map[string]string
		want             string
	}{
		{"chat prompt_cache_key", "/v1/chat/completions", chatBody + `,"prompt_cache_key":"chat-7"}`, nil, "chat-7"},
		{"responses prompt_cache_key", "/v1/responses", responses + `,"prompt_cache_key":"resp-1"}`, nil, "resp-1"},
		{"the body's key first", "/v1/responses", responses + `,"prompt_cache_key":"resp-2"}`, map[string]string{"Session-Id": "other"}, "resp-2"},
		{"codex session-id", "/v1/responses", responses + `}`, map[string]string{"session-id": "0199-codex"}, "0199-codex"},
		{"claude code session", "/v1/messages", messages + `}`, map[string]string{"X-Claude-Code-Session-Id": "5da7-claude"}, "5da7-claude"},
		{"k3 header first", "/v1/messages", messages + `}`, map[string]string{"X-K3-Cache-Key": "mine", "X-Claude-Code-Session-Id": "5da7"}, "mine"},
		{"completions header", "/v1/completions", `{"prompt":"hi","max_tokens":1,"seed":1}`, map[string]string{"X-K3-Cache-Key": "c"}, "c"},
		{"no key", "/v1/chat/completions", chatBody + `}`, nil, ""},
		{"a long key is cut", "/v1/chat/completions", chatBody + `,"prompt_cache_key":"` + long + `"}`, nil, long[:maxKeyLog]},
	} {
		req, err := http.NewRequest("POST", ts.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", c.name, resp.StatusCode)
		}
		a := accessLog(t, records)
		if a["cache_key"] != c.want || a["prompt_tokens"] == "" {
			t.Errorf("%s: access log %v, want cache_key %q", c.name, a, c.want)
		}
	}
}
