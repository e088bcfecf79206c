package batchjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// errResponseTooLarge ends a handler's writes past Options.MaxResponseBytes.
var errResponseTooLarge = errors.New("response body too large")

// bufferedResponse is the http.ResponseWriter a request is served into:
// it keeps the status and up to max bytes of body. It is deliberately not
// an http.Flusher: batch responses are whole.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
	max    int
	over   bool
}

func (w *bufferedResponse) Header() http.Header { return w.header }

func (w *bufferedResponse) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are interim
		w.status = code
	}
}

func (w *bufferedResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.body.Len()+len(p) > w.max {
		w.over = true
		return 0, errResponseTooLarge
	}
	return w.body.Write(p)
}

// outcome is what one request produced: the output line, and for the
// summary whether it failed and how many tokens it generated.
type outcome struct {
	line   []byte
	failed bool
	tokens int64
}

// serve sends r to h in process and returns its output line.
func serve(ctx context.Context, h http.Handler, r *request, maxBody int) (outcome, error) {
	id, requestID := r.ids()
	out := &outputLine{ID: id}
	if r.customID != "" {
		out.CustomID = &r.customID
	}
	finish := func(tokens int64) (outcome, error) {
		line, err := encodeLine(out)
		failed := out.Error != nil || out.Response.StatusCode < 200 || out.Response.StatusCode > 299
		if failed {
			tokens = 0
		}
		return outcome{line: line, failed: failed, tokens: tokens}, err
	}
	if r.fail != nil {
		out.Error = r.fail
		return finish(0)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(r.body))
	if err != nil { // the URL was checked against Options.URLs: a bad entry there
		out.Error = &lineError{Code: codeInvalidRequest, Message: fmt.Sprintf("input line %d: %v", r.line+1, err)}
		return finish(0)
	}
	hr.RequestURI = r.url
	hr.RemoteAddr = "k3-batch"
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-Request-Id", requestID)
	w := &bufferedResponse{header: make(http.Header), max: maxBody}
	switch perr := callHandler(h, w, hr); {
	case perr != nil:
		out.Error = &lineError{Code: codeHandlerPanicked, Message: fmt.Sprintf("input line %d: the handler panicked: %v", r.line+1, perr)}
		return finish(0)
	case w.over:
		out.Error = &lineError{Code: codeResponseTooBig, Message: fmt.Sprintf("input line %d: the response body is larger than %d bytes", r.line+1, maxBody)}
		return finish(0)
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	out.Response = &response{StatusCode: w.status, RequestID: requestID, Body: jsonBody(w.body.Bytes())}
	return finish(completionTokens(out.Response.Body))
}

// callHandler runs h, turning a panic into an error so one request cannot
// end the job.
func callHandler(h http.Handler, w http.ResponseWriter, r *http.Request) (perr any) {
	defer func() {
		if p := recover(); p != nil {
			perr = p
			if p == http.ErrAbortHandler {
				perr = "aborted"
			}
		}
	}()
	h.ServeHTTP(w, r)
	return nil
}

// jsonBody is b as a JSON value: itself when it is JSON, null when empty,
// else a JSON string of its text.
func jsonBody(b []byte) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// completionTokens reads usage.completion_tokens from an OpenAI response
// body; 0 if absent.
func completionTokens(body []byte) int64 {
	var u struct {
		Usage struct {
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &u) != nil {
		return 0
	}
	return max(u.Usage.CompletionTokens, 0)
}
