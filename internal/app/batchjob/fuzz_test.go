package batchjob

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// FuzzRequestLine: any input line becomes exactly one output line that is
// one JSON object, keyed by its custom_id when it has one; parsing never
// panics.
func FuzzRequestLine(f *testing.F) {
	f.Add([]byte(requestLine("a", "/v1/completions", `{"prompt":"hi"}`)))
	f.Add([]byte(`{"custom_id":"s","method":"POST","url":"/v1/chat/completions","body":{"stream":true}}`))
	f.Add([]byte(`{"custom_id":"","method":"POST"}`))
	f.Add([]byte(`{"custom_id":"x","method":"POST","url":"/v1/completions","body":{"big":99999}}`))
	f.Add([]byte(`[`))
	h := &fakeHandler{}
	f.Fuzz(func(t *testing.T, b []byte) {
		if bytes.ContainsAny(b, "\n") {
			return // one line at a time
		}
		r := parseRequest(3, b, false, DefaultURLs, 1<<20)
		if r.fail == nil && (r.customID == "" || !json.Valid(r.body)) {
			t.Fatalf("accepted %q without a custom_id or a valid body", b)
		}
		o, err := serve(context.Background(), h, r, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(o.line, []byte("\n")) != 1 || o.line[len(o.line)-1] != '\n' {
			t.Fatalf("output %q is not one line", o.line)
		}
		var l outputLine
		if err := json.Unmarshal(o.line, &l); err != nil || l.ID == "" {
			t.Fatalf("output %q: %v", o.line, err)
		}
		if (l.CustomID == nil) != (r.customID == "") || (l.Error == nil) == (l.Response == nil) {
			t.Fatalf("output %q for input %q", o.line, b)
		}
	})
}
