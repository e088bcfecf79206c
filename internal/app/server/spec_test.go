package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// stable drops what differs between two answers to the same request (ids,
// timestamps) and returns the rest as JSON.
func stable(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	var clean func(any) any
	clean = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			for k := range x {
				if k == "id" || strings.HasSuffix(k, "_id") || strings.Contains(k, "created") || strings.Contains(k, "completed_at") {
					delete(x, k)
					continue
				}
				x[k] = clean(x[k])
			}
		case []any:
			for i := range x {
				x[i] = clean(x[i])
			}
		}
		return x
	}
	out, _ := json.Marshal(clean(v))
	return string(out)
}

// TestSpeculationExactThroughAPIs serves one model per --spec mode (off, 8,
// auto with the pass costs of a streamed trunk, so that auto drafts) and
// sends each the same requests: chat completions, Responses and Messages,
// greedy and sampled with a fixed seed; four chat requests at once (one
// batch); a JSON schema response format; a conversation's second turn,
// whose prompt the prefix cache restores. Every answer is the plain
// server's, and the speculating servers did verify drafts (counted in the
// access log and /metrics).
func TestSpeculationExactThroughAPIs(t *testing.T) {
	dir := grammartest.ReleaseModelDir(t)
	engine.SpecCostForTests.Store(&specpolicy.Cost{CPUFixed: 1, CPURow: 0.1})
	t.Cleanup(func() { engine.SpecCostForTests.Store(nil) })
	type req struct{ path, body string }
	words := "alpha beta gamma delta alpha beta gamma delta alpha beta gamma delta"
	var reqs []req
	for _, temp := range []string{"0", "1"} {
		reqs = append(reqs,
			req{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + words + `"}],"max_tokens":24,"temperature":` + temp + `,"seed":7}`},
			req{"/v1/responses", `{"input":"` + words + `","max_output_tokens":24,"temperature":` + temp + `}`},
			req{"/v1/messages", `{"model":"k3-test","max_tokens":24,"temperature":` + temp + `,"messages":[{"role":"user","content":"` + words + `"}]}`},
		)
	}
	schema := `{"messages":[{"role":"user","content":"Weather in Paris, as JSON."}],"thinking":{"type":"disabled"},
		"response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":` + answerSchema + `}},"seed":3,"max_tokens":200}`
	reqs = append(reqs, req{"/v1/chat/completions", schema})
	// A conversation and its next turn: the second restores the first's
	// prompt and reply from the prefix cache.
	turn1 := `{"role":"user","content":"` + words + ` and then"}`
	reqs = append(reqs, req{"/v1/chat/completions", `{"messages":[` + turn1 + `],"max_tokens":20,"temperature":0}`})
	batch := make([]string, 4)
	for i := range batch {
		batch[i] = fmt.Sprintf(`{"messages":[{"role":"user","content":"%s %d"}],"max_tokens":20,"temperature":%d,"seed":%d}`, words, i, i%2, i)
	}

	answers := map[string][]string{}
	for _, mode := range []int{0, 8, k3.SpeculateAuto} {
		m, err := k3.Open(dir, k3.Options{MaxContext: 1024, Sessions: 4, Speculate: mode,
			PrefixCache: &k3.PrefixCacheOptions{RAMBytes: 64 << 20, DiskBytes: -1, BlockTokens: 16}})
		if err != nil {
			t.Fatal(err)
		}
		var logBuf bytes.Buffer
		var logMu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logBuf, mu: &logMu}, nil))
		s, err := New(m, Options{Name: "k3-test", Sessions: 4, Speculate: mode, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.randomSeed = func() uint64 { return 11 }
		ts := httptest.NewServer(s.Handler())
		var got []string
		for _, r := range reqs {
			resp, b := post(t, ts, r.path, r.body)
			if resp.StatusCode != 200 {
				t.Fatalf("spec %d %s: %d %s", mode, r.path, resp.StatusCode, b)
			}
			got = append(got, stable(t, b))
		}
		// The second turn: the first turn's prompt and reply, then more.
		var c struct {
			Choices []struct {
				Message struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"message"`
			} `json:"choices"`
		}
		json.Unmarshal([]byte(got[len(got)-1]), &c)
		reply, _ := json.Marshal(map[string]string{"role": "assistant", "content": c.Choices[0].Message.Content, "reasoning_content": c.Choices[0].Message.ReasoningContent})
		resp, b := post(t, ts, "/v1/chat/completions", `{"messages":[`+turn1+`,`+string(reply)+`,{"role":"user","content":"again: `+words+`"}],"max_tokens":20,"temperature":0}`)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"cached_tokens":`) || strings.Contains(string(b), `"cached_tokens":0`) {
			t.Fatalf("spec %d: the second turn restored nothing: %d %s", mode, resp.StatusCode, b)
		}
		got = append(got, stable(t, b))
		// Four at once.
		out := make([]string, len(batch))
		var wg sync.WaitGroup
		for i, body := range batch {
			wg.Go(func() {
				resp, b := post(t, ts, "/v1/chat/completions", body)
				if resp.StatusCode != 200 {
					t.Errorf("spec %d batch %d: %d %s", mode, i, resp.StatusCode, b)
				}
				out[i] = stable(t, b)
			})
		}
		wg.Wait()
		got = append(got, out...)
		answers[fmt.Sprint(mode)] = got

		drafted := m.Stats().SpecRows - m.Stats().SpecPasses
		_, _, mb := get(t, ts.URL+"/metrics")
		logMu.Lock()
		logged := logBuf.String()
		logMu.Unlock()
		ts.Close()
		m.Close()
		if !strings.Contains(logged, "drafted_tokens=") || !strings.Contains(logged, "accepted_tokens=") {
			t.Fatalf("spec %d: the access log has no drafted and accepted tokens: %s", mode, logged)
		}
		if !strings.Contains(mb, "k3_draft_tokens_total") || !strings.Contains(mb, "k3_request_draft_tokens_bucket") {
			t.Fatalf("spec %d: /metrics has no speculation counters", mode)
		}
		if mode != 0 && drafted == 0 {
			t.Fatalf("spec %d verified no draft: the test shows nothing", mode)
		}
		if mode != 0 && !strings.Contains(mb, fmt.Sprintf("k3_draft_tokens_total %d", drafted)) {
			t.Fatalf("spec %d: %d drafts verified, /metrics says otherwise", mode, drafted)
		}
	}
	want := answers["0"]
	for mode, got := range answers {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("spec %s, request %d: %s\nplain: %s", mode, i, got[i], want[i])
			}
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
