package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// ids matches the generated ids of a reply's items, which differ between
// two servers.
var ids = regexp.MustCompile(`"id":"[^"]*"`)

// TestServeThroughCluster serves the test model from one process and from
// a cluster of 2 ranks (a Worker in this process on 127.0.0.1) and checks
// that the three chat APIs, completions with a JSON schema, and four
// concurrent requests answer with the same text; /health is 200 while the
// worker is there and 503 naming it once it is gone.
func TestServeThroughCluster(t *testing.T) {
	dir := testmodel.Dir(t)
	key := []byte("server cluster test key, 32 bytes")
	w, err := k3.NewWorker(dir, k3.WorkerOptions{Threads: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- w.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addr <- a.String() }) }()
	peer := <-addr
	stopWorker := func() {
		cancel()
		<-done
		w.Close()
	}
	defer func() {
		if ctx.Err() == nil {
			stopWorker()
		}
	}()
	serve := func(opts k3.Options) *httptest.Server {
		m, err := k3.Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		s, err := New(m, Options{Name: "k3-test", Sessions: 4})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(ts.Close)
		return ts
	}
	one := serve(k3.Options{Sessions: 4})
	two := serve(k3.Options{Sessions: 4, Cluster: &k3.ClusterOptions{Peers: []string{peer}, Key: key}})

	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	requests := []struct{ path, body, field string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello"}],"max_tokens":12,"seed":3,"thinking":false}`, "choices"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"JSON please"}],"max_tokens":40,"temperature":0,"thinking":false,` +
			`"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + schema + `}}}`, "choices"},
		{"/v1/responses", `{"input":"Hello","max_output_tokens":12,"temperature":0}`, "output"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":12,"messages":[{"role":"user","content":"Hello"}],"temperature":0}`, "content"},
		{"/v1/completions", `{"prompt":"The capital of France is","max_tokens":10,"temperature":0}`, "choices"},
	}
	answer := func(ts *httptest.Server, path, body, field string) string {
		resp, b := post(t, ts, path, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return ids.ReplaceAllString(string(v[field]), `"id":""`)
	}
	for _, r := range requests {
		a, b := answer(one, r.path, r.body, r.field), answer(two, r.path, r.body, r.field)
		if a != b || a == "" {
			t.Fatalf("%s %s:\none process %s\n2 ranks      %s", r.path, r.body, a, b)
		}
	}
	// Four at once: shared passes over the cluster.
	var wg sync.WaitGroup
	got := make([]string, len(requests)-1)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := post(t, two, requests[i].path, requests[i].body)
			if resp.StatusCode == http.StatusOK {
				var v map[string]json.RawMessage
				json.Unmarshal(b, &v)
				got[i] = ids.ReplaceAllString(string(v[requests[i].field]), `"id":""`)
			}
		}()
	}
	wg.Wait()
	for i := range got {
		if want := answer(one, requests[i].path, requests[i].body, requests[i].field); got[i] != want {
			t.Fatalf("concurrent %s: %s, alone %s", requests[i].path, got[i], want)
		}
	}
	resp, _ := http.Get(two.URL + "/health")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health with every rank: %d", resp.StatusCode)
	}
	resp.Body.Close()
	stopWorker()
	// The worker is gone: the next request fails naming it, and /health
	// says so.
	resp, b := post(t, two, requests[0].path, requests[0].body)
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("a request with the worker gone: 200 %s", b)
	}
	resp, err = http.Get(two.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(h["reason"], "rank 1") {
		t.Fatalf("/health with the worker gone: %d %v", resp.StatusCode, h)
	}
}
