package batchjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeHandler answers like an OpenAI server, deterministically: the
// response is a function of the path and body. A body may ask it to fail
// ("fail": true), panic, write a big body ("big": N bytes) or block until
// the request is cancelled ("block": true). delay slows every request.
type fakeHandler struct {
	delay  time.Duration
	calls  atomic.Int64
	active atomic.Int64
	most   atomic.Int64 // the most requests in flight at once
}

func (f *fakeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	n := f.active.Add(1)
	defer f.active.Add(-1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Prompt string `json:"prompt"`
		Fail   bool   `json:"fail"`
		Panic  bool   `json:"panic"`
		Big    int    `json:"big"`
		Block  bool   `json:"block"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%q}}`, err.Error())
		return
	}
	if f.delay > 0 || req.Block {
		var wait <-chan time.Time
		if !req.Block {
			wait = time.After(f.delay)
		}
		select {
		case <-wait:
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"message":"cancelled"}}`)
			return
		}
	}
	switch {
	case req.Panic:
		panic("asked to panic")
	case req.Fail:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"asked to fail","type":"invalid_request_error"}}`)
		return
	case req.Big > 0:
		w.Write(bytes.Repeat([]byte(" "), req.Big))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	// Indented, with HTML characters and an escaped newline: the output
	// line must still be one line and keep the text.
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(map[string]any{
		"object": r.URL.Path, "text": "<" + strings.ToUpper(req.Prompt) + ">\n&",
		"request_id_seen": r.Header.Get("X-Request-Id"),
		"usage":           map[string]int{"completion_tokens": len(req.Prompt)},
	})
}

// TestMain runs the crash tests' child job when asked to (see
// crash_test.go), else the tests.
func TestMain(m *testing.M) {
	if os.Getenv("K3_BATCHJOB_CHILD") != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// requestLine is one valid input line.
func requestLine(id, url, body string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":%q,"body":%s}`, id, url, body)
}

// writeInput writes n valid requests (alternating the two endpoints), then
// the extra lines, and returns the path.
func writeInput(t testing.TB, n int, extra ...string) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		url := DefaultURLs[i%2]
		fmt.Fprintln(&b, requestLine(fmt.Sprintf("req-%03d", i), url, fmt.Sprintf(`{"prompt":"prompt %d","max_tokens":4}`, i)))
	}
	for _, l := range extra {
		fmt.Fprintln(&b, l)
	}
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// result is a parsed output line, with its text.
type result struct {
	ID       string  `json:"id"`
	CustomID *string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw string
}

// readOutput parses every line of an output file; every line must be a
// whole JSON object ending in a newline.
func readOutput(t *testing.T, path string) []result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline: %q", path, b[max(len(b)-80, 0):])
	}
	var rs []result
	for i, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		var r result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s line %d is not JSON: %v: %q", path, i+1, err, l)
		}
		r.raw = l
		rs = append(rs, r)
	}
	return rs
}

// sortedLines returns the output's lines, sorted: the comparable form of a
// job's results (lines are written in completion order).
func sortedLines(t *testing.T, paths ...string) []string {
	t.Helper()
	var ls []string
	for _, p := range paths {
		for _, r := range readOutput(t, p) {
			ls = append(ls, r.raw)
		}
	}
	slices.Sort(ls)
	return ls
}

// keysOnce checks that no two lines of rs are for the same request.
func keysOnce(t *testing.T, rs []result) map[string]bool {
	t.Helper()
	seen := make(map[string]bool)
	for _, r := range rs {
		k := r.ID
		if r.CustomID != nil {
			k = *r.CustomID
		}
		if seen[k] {
			t.Errorf("request %s written twice", k)
		}
		seen[k] = true
	}
	return seen
}

func run(t *testing.T, h http.Handler, o Options) Summary {
	t.Helper()
	s, err := Run(context.Background(), h, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunResults: every request gets one line with the handler's answer;
// every kind of bad line gets an error line with its custom_id where it
// has one, and the job goes on.
func TestRunResults(t *testing.T) {
	const n = 12
	bad := []string{
		`{"custom_id":"bad-json",`,
		`[1,2,3]`,
		`{"method":"POST","url":"/v1/completions","body":{}}`,
		`{"custom_id":7,"method":"POST","url":"/v1/completions","body":{}}`,
		`{"custom_id":"bad-method","method":"GET","url":"/v1/completions","body":{}}`,
		`{"custom_id":"bad-url","method":"POST","url":"/v1/embeddings","body":{}}`,
		`{"custom_id":"bad-body","method":"POST","url":"/v1/completions","body":"hi"}`,
		`{"custom_id":"bad-type","method":5,"url":"/v1/completions","body":{}}`,
		requestLine("streamed", "/v1/chat/completions", `{"messages":[],"stream":true}`),
		requestLine("fails", "/v1/completions", `{"fail":true}`),
		requestLine("panics", "/v1/completions", `{"panic":true}`),
		requestLine("too-big", "/v1/completions", `{"big":5000}`),
		`{"custom_id":"too-long","method":"POST","url":"/v1/completions","body":{"prompt":"` + strings.Repeat("x", 3000) + `"}}`,
		"",
		"   ",
	}
	in := writeInput(t, n, bad...)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	h := &fakeHandler{}
	s := run(t, h, Options{Input: in, Output: out, Concurrency: 3, MaxLineBytes: 2048, MaxResponseBytes: 4096})
	if want := n + len(bad) - 2; s.Selected != want || s.Written != want || s.Skipped != 0 || s.Lines != n+len(bad) {
		t.Errorf("summary %+v: want %d selected and written of %d lines", s, want, n+len(bad))
	}
	if s.Failed != len(bad)-2 {
		t.Errorf("%d failed, want %d", s.Failed, len(bad)-2)
	}
	rs := readOutput(t, out)
	keysOnce(t, rs)
	byID := make(map[string]result)
	var noID []result
	for _, r := range rs {
		if r.CustomID == nil {
			noID = append(noID, r)
			continue
		}
		byID[*r.CustomID] = r
	}
	var tokens int64
	for i := range n {
		id := fmt.Sprintf("req-%03d", i)
		r, ok := byID[id]
		if !ok || r.Response == nil || r.Error != nil {
			t.Fatalf("%s: %+v", id, r)
		}
		var body struct {
			Object string `json:"object"`
			Text   string `json:"text"`
			Seen   string `json:"request_id_seen"`
		}
		if err := json.Unmarshal(r.Response.Body, &body); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("<PROMPT %d>\n&", i)
		if r.Response.StatusCode != 200 || body.Object != DefaultURLs[i%2] || body.Text != want || body.Seen != r.Response.RequestID {
			t.Errorf("%s: status %d, body %+v; want object %s, text %q, request id %s", id, r.Response.StatusCode, body, DefaultURLs[i%2], want, r.Response.RequestID)
		}
		if !strings.HasPrefix(r.ID, "batch_req_") || !strings.HasPrefix(r.Response.RequestID, "req_") {
			t.Errorf("%s: ids %q, %q", id, r.ID, r.Response.RequestID)
		}
		if !strings.Contains(r.raw, `"<PROMPT`) {
			t.Errorf("%s: HTML characters escaped in %s", id, r.raw)
		}
		tokens += int64(len(fmt.Sprintf("prompt %d", i)))
	}
	if s.CompletionTokens != tokens {
		t.Errorf("%d completion tokens, want %d", s.CompletionTokens, tokens)
	}
	wantErr := map[string]string{"bad-method": codeInvalidRequest, "bad-url": codeInvalidRequest, "bad-body": codeInvalidRequest,
		"bad-type": codeInvalidRequest, "streamed": codeStreamRefused, "panics": codeHandlerPanicked, "too-big": codeResponseTooBig}
	for id, code := range wantErr {
		r := byID[id]
		if r.Error == nil || r.Error.Code != code || r.Response != nil || !strings.Contains(r.Error.Message, "input line") {
			t.Errorf("%s: got %s, want error %s", id, r.raw, code)
		}
	}
	if r := byID["fails"]; r.Response == nil || r.Response.StatusCode != 400 || r.Error != nil || !strings.Contains(string(r.Response.Body), "asked to fail") {
		t.Errorf("fails: %s: want the handler's 400 as the response", r.raw)
	}
	// bad-json, the array, no custom_id, a numeric custom_id, and the
	// over-long line (its custom_id is not read) have none.
	if len(noID) != 5 {
		t.Fatalf("%d lines without custom_id, want 5: %v", len(noID), noID)
	}
	codes := make(map[string]int)
	for _, r := range noID {
		codes[r.Error.Code]++
	}
	if codes[codeInvalidJSON] != 2 || codes[codeInvalidRequest] != 2 || codes[codeLineTooLong] != 1 {
		t.Errorf("error codes of lines without custom_id: %v", codes)
	}
	if h.most.Load() > 3 {
		t.Errorf("%d requests in flight at once, concurrency 3", h.most.Load())
	}

	// A rerun has nothing left to do and changes nothing.
	before := sortedLines(t, out)
	s = run(t, h, Options{Input: in, Output: out, Concurrency: 3, MaxLineBytes: 2048, MaxResponseBytes: 4096})
	if s.Written != 0 || s.Skipped != s.Selected || s.Foreign != 0 {
		t.Errorf("rerun: %+v, want everything skipped", s)
	}
	if !slices.Equal(before, sortedLines(t, out)) {
		t.Error("rerun changed the output")
	}
}

// runUntil runs a job and cancels it once its output holds at least lines
// lines (a request that blocks until cancelled keeps it from ending first).
func runUntil(t *testing.T, h http.Handler, o Options, lines int) (Summary, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type res struct {
		s   Summary
		err error
	}
	done := make(chan res, 1)
	go func() {
		s, err := Run(ctx, h, o)
		done <- res{s, err}
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-done:
			return r.s, r.err
		case <-deadline:
			t.Fatalf("the job did not write %d lines in 30 s", lines)
		case <-time.After(time.Millisecond):
		}
		if b, _ := os.ReadFile(o.Output); bytes.Count(b, []byte("\n")) >= lines {
			cancel()
		}
	}
}

// TestResume: a run stopped partway (its context cancelled), then a torn
// line appended as a killed write would leave it, then a rerun: every
// request once, and the same lines as one uninterrupted run.
func TestResume(t *testing.T) {
	const n = 40
	in := writeInput(t, n, requestLine("blocks", "/v1/completions", `{"block":true}`))
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.jsonl")
	h := &fakeHandler{}
	// The reference holds the n requests that complete; the one that
	// blocks is in flight when the job is cancelled, and is not written.
	if _, err := runUntil(t, h, Options{Input: in, Output: ref, Concurrency: 4}, n); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled job ended with %v, want context.Canceled", err)
	}
	rs := readOutput(t, ref)
	if len(rs) != n {
		t.Fatalf("%d lines after the cancelled run, want the %d that completed", len(rs), n)
	}
	for _, r := range rs {
		if *r.CustomID == "blocks" {
			t.Fatal("the request in flight at cancellation was written")
		}
	}

	out := filepath.Join(dir, "out.jsonl")
	s, err := runUntil(t, &fakeHandler{delay: 2 * time.Millisecond}, Options{Input: in, Output: out, Concurrency: 2}, 15)
	if !errors.Is(err, context.Canceled) || s.Written < 15 || s.Written >= n {
		t.Fatalf("cancelled run: %v, %+v", err, s)
	}
	first := s.Written
	// A torn line: the first half of a result line, no newline.
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := rs[len(rs)-1].raw
	f.WriteString(torn[:len(torn)/2])
	f.Close()

	s, err = runUntil(t, h, Options{Input: in, Output: out, Concurrency: 3}, n)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("rerun: %v", err)
	}
	if s.Skipped != first || s.Written != n-first || s.Truncated != int64(len(torn)/2) {
		t.Errorf("rerun: %+v; want %d skipped, %d written, %d bytes truncated", s, first, n-first, len(torn)/2)
	}
	keysOnce(t, readOutput(t, out))
	if got, want := sortedLines(t, out), sortedLines(t, ref); !slices.Equal(got, want) {
		t.Errorf("resumed output differs from the uninterrupted run:\n%q\n%q", got, want)
	}
}

// TestShards: the shards of a job, each in its own output, together equal
// the unsharded run, and no request is in two shards.
func TestShards(t *testing.T) {
	in := writeInput(t, 23, "", `not json`, requestLine("x", "/v1/completions", `{"fail":true}`))
	dir := t.TempDir()
	ref := filepath.Join(dir, "all.jsonl")
	h := &fakeHandler{}
	run(t, h, Options{Input: in, Output: ref, Concurrency: 4})
	for _, n := range []int{1, 2, 3, 7, 40} {
		var outs []string
		total := 0
		for i := range n {
			out := filepath.Join(dir, fmt.Sprintf("shard-%d-of-%d.jsonl", i, n))
			s := run(t, h, Options{Input: in, Output: out, Shard: i, Shards: n, Concurrency: 2})
			total += s.Written
			outs = append(outs, out)
		}
		if got, want := sortedLines(t, outs...), sortedLines(t, ref); !slices.Equal(got, want) {
			t.Errorf("%d shards: %d lines, unsharded %d, or they differ", n, len(got), len(want))
		}
		if total != 25 {
			t.Errorf("%d shards wrote %d lines, want 25", n, total)
		}
	}
}

// TestRefusals: input and options errors stop the job before any request
// is sent.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	dup := writeInput(t, 3, requestLine("req-001", "/v1/completions", `{}`))
	h := &fakeHandler{}
	out := filepath.Join(dir, "out.jsonl")
	for _, c := range []struct {
		name string
		o    Options
		want error
	}{
		{"duplicate custom_id", Options{Input: dup, Output: out}, ErrBadInput},
		{"duplicate in another shard", Options{Input: dup, Output: out, Shard: 0, Shards: 2}, ErrBadInput},
		{"shard out of range", Options{Input: dup, Output: out, Shard: 2, Shards: 2}, ErrBadOptions},
		{"negative shard", Options{Input: dup, Output: out, Shard: -1, Shards: 2}, ErrBadOptions},
		{"negative concurrency", Options{Input: dup, Output: out, Concurrency: -1}, ErrBadOptions},
		{"no output", Options{Input: dup}, ErrBadOptions},
		{"output is input", Options{Input: dup, Output: dup}, ErrBadOptions},
		{"missing input", Options{Input: filepath.Join(dir, "nope"), Output: out}, os.ErrNotExist},
	} {
		_, err := Run(context.Background(), h, c.o)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if h.calls.Load() != 0 {
		t.Errorf("%d requests sent by refused jobs", h.calls.Load())
	}
	if b, _ := os.ReadFile(out); len(b) != 0 {
		t.Errorf("refused jobs wrote %q", b)
	}

	// An output holding something other than result lines is not appended to.
	in := writeInput(t, 3)
	junk := filepath.Join(dir, "junk.jsonl")
	os.WriteFile(junk, []byte("{\"id\":\"batch_req_1\",\"custom_id\":\"a\"}\nhello\n"), 0o644)
	if _, err := Run(context.Background(), h, Options{Input: in, Output: junk}); !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("junk output: %v, want ErrBadOutput naming line 2", err)
	}
}

// TestOutputLocked: a second job on an output in use is refused.
func TestOutputLocked(t *testing.T) {
	if !haveFlock {
		t.Skip("no flock(2) here")
	}
	in := writeInput(t, 4, requestLine("blocks", "/v1/completions", `{"block":true}`))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	h := &fakeHandler{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := Run(ctx, h, Options{Input: in, Output: out, Concurrency: 8})
		done <- err
	}()
	for h.calls.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	_, err := Run(context.Background(), h, Options{Input: in, Output: out})
	cancel()
	<-done
	if !errors.Is(err, ErrBadOutput) {
		t.Errorf("second job on a busy output: %v, want ErrBadOutput", err)
	}
}

// TestProgress: plain lines on a pipe, and the last one says all is done.
func TestProgress(t *testing.T) {
	in := writeInput(t, 30)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	var buf syncBuffer
	run(t, &fakeHandler{delay: 3 * time.Millisecond}, Options{Input: in, Output: out, Concurrency: 2, Progress: &buf, ProgressEvery: 5 * time.Millisecond})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	last := lines[len(lines)-1]
	if len(lines) < 2 || !strings.HasPrefix(last, "batch 30/30 (100.0%)") || !strings.Contains(last, "tok/s") || strings.Contains(buf.String(), "\r") {
		t.Errorf("progress lines: %q", lines)
	}
	r := &reporter{total: 10, before: 5, done: 2, failed: 1, tokens: 50}
	if got, want := r.format(10*time.Second), "batch 7/15 (46.7%), 5 from before, 1 failed, 5.0 tok/s, 10s elapsed, eta 40s"; got != want {
		t.Errorf("format: %q, want %q", got, want)
	}
	if got, want := r.bar(10), "[====      ]"; got != want {
		t.Errorf("bar: %q, want %q", got, want)
	}

	// On a terminal the line is redrawn in place, with a bar.
	buf.buf.Reset()
	out2 := filepath.Join(t.TempDir(), "out.jsonl")
	run(t, &fakeHandler{}, Options{Input: in, Output: out2, Progress: &buf, ProgressTerminal: true})
	if s := buf.String(); !strings.HasPrefix(s, "\r[") || !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 ||
		!strings.Contains(s, "[====================] batch 30/30 (100.0%)") {
		t.Errorf("terminal progress: %q", s)
	}
}

// syncBuffer is a bytes.Buffer safe for the reporter's goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLineReader: lines at and past the limit, CRLF, a last line without
// a newline.
func TestLineReader(t *testing.T) {
	long := strings.Repeat("a", 70000) // longer than the reader's buffer
	src := "abc\r\n" + strings.Repeat("b", 10) + "\n" + strings.Repeat("c", 11) + "\n" + long + "\n\nlast"
	lr := newLineReader(strings.NewReader(src), 10)
	type got struct {
		line    string
		tooLong bool
	}
	var gs []got
	for {
		b, tl, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, got{string(b), tl})
	}
	want := []got{{"abc", false}, {strings.Repeat("b", 10), false}, {"", true}, {"", true}, {"", false}, {"last", false}}
	if !slices.Equal(gs, want) {
		t.Errorf("lines %v, want %v", gs, want)
	}
}

// orderHandler records, for each request, when it started and ended on a
// logical clock, so that a test can check which requests overlapped.
type orderHandler struct {
	mu         sync.Mutex
	clock      int
	start, end map[string]int
}

func (h *orderHandler) tick(m map[string]int, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	m[id] = h.clock
}

func (h *orderHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt string `json:"prompt"`
	}
	body, _ := io.ReadAll(r.Body)
	json.Unmarshal(body, &req)
	h.tick(h.start, req.Prompt)
	runtime.Gosched()
	h.tick(h.end, req.Prompt)
	fmt.Fprint(w, `{"choices":[{"text":"ok"}],"usage":{"completion_tokens":1}}`)
}

// TestGroupPrefixes checks that, with GroupPrefixes, every request of a
// header group starts after the group's first request ended, that
// requests without a header or of other groups are not held back by it,
// and that every line is answered once.
func TestGroupPrefixes(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := range 24 {
		sys := fmt.Sprintf(`"messages":[{"role":"system","content":"header %d"},{"role":"user","content":"q"}]`, i%3)
		if i%4 == 3 {
			sys = `"messages":[{"role":"user","content":"no header"}]`
		}
		lines = append(lines, fmt.Sprintf(`{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"prompt":"r%d",%s}}`, i, i, sys))
	}
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &orderHandler{start: map[string]int{}, end: map[string]int{}}
	s, err := Run(context.Background(), h, Options{Input: in, Output: filepath.Join(dir, "out.jsonl"), Concurrency: 4, GroupPrefixes: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Written != 24 || len(h.start) != 24 {
		t.Fatalf("%d written, %d served, want 24", s.Written, len(h.start))
	}
	leader := map[int]string{}
	for i := range 24 {
		if i%4 == 3 {
			continue
		}
		id := fmt.Sprintf("r%d", i)
		g := i % 3
		if _, ok := leader[g]; !ok {
			leader[g] = id
			continue
		}
		if h.start[id] < h.end[leader[g]] {
			t.Errorf("%s of header %d started at %d, before its group's first request %s ended at %d", id, g, h.start[id], leader[g], h.end[leader[g]])
		}
	}
}
