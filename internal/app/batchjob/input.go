package batchjob

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// lineReader reads lines of at most max bytes (the newline and a carriage
// return before it not counted). A longer line is consumed whole and
// reported as too long, holding no more than max+2 bytes of it in memory.
type lineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line ending, or io.EOF after the
// last. The line is valid until the following call.
func (r *lineReader) next() (line []byte, tooLong bool, err error) {
	r.buf = r.buf[:0]
	sawAny := false
	for {
		frag, err := r.br.ReadSlice('\n')
		sawAny = sawAny || len(frag) > 0
		if !tooLong {
			if len(r.buf)+len(frag) > r.max+2 {
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, frag...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if !sawAny {
				return nil, false, io.EOF
			}
		case err != nil:
			return nil, false, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(r.buf, []byte("\n")), []byte("\r"))
		if len(line) > r.max {
			tooLong, line = true, nil
		}
		return line, tooLong, nil
	}
}

// request is one selected input line, ready to send or already failed.
type request struct {
	line     int    // 0-based index in the input
	customID string // "" when the line has no usable custom_id
	url      string
	body     []byte
	fail     *lineError // non-nil: write this error instead of sending
}

// lineError is the "error" object of an output line.
type lineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes of lines that were not sent.
const (
	codeInvalidJSON     = "invalid_json"
	codeInvalidRequest  = "invalid_request"
	codeLineTooLong     = "line_too_long"
	codeStreamRefused   = "stream_not_supported"
	codeResponseTooBig  = "response_too_large"
	codeHandlerPanicked = "internal_error"
)

// inputLine is the shape of one input line.
type inputLine struct {
	Method string          `json:"method"`
	URL    string          `json:"url"`
	Body   json.RawMessage `json:"body"`
}

// lineCustomID returns a line's custom_id if the line is a JSON object
// whose custom_id is a non-empty string, else "", whatever is wrong with
// the rest of the line.
func lineCustomID(b []byte) string {
	var in struct {
		CustomID json.RawMessage `json:"custom_id"`
	}
	var s string
	if json.Unmarshal(b, &in) != nil || len(in.CustomID) == 0 || in.CustomID[0] != '"' || json.Unmarshal(in.CustomID, &s) != nil {
		return ""
	}
	return s
}

// parseRequest turns input line number line (0-based) into a request; a
// line that cannot be sent gets fail set, with its custom_id when it has
// one.
func parseRequest(line int, b []byte, tooLong bool, urls []string, maxLine int) *request {
	r := &request{line: line}
	failf := func(code, format string, args ...any) *request {
		r.fail = &lineError{Code: code, Message: fmt.Sprintf("input line %d: ", line+1) + fmt.Sprintf(format, args...)}
		return r
	}
	if tooLong {
		return failf(codeLineTooLong, "longer than %d bytes", maxLine)
	}
	if t := bytes.TrimLeft(b, " \t"); len(t) == 0 || t[0] != '{' || !json.Valid(b) {
		return failf(codeInvalidJSON, "not a JSON object")
	}
	r.customID = lineCustomID(b)
	var in inputLine
	if err := json.Unmarshal(b, &in); err != nil {
		return failf(codeInvalidRequest, "%v", err) // a field of the wrong type
	}
	switch {
	case r.customID == "":
		return failf(codeInvalidRequest, "custom_id must be a non-empty string")
	case in.Method != "POST":
		return failf(codeInvalidRequest, "method must be \"POST\", not %q", in.Method)
	case !slices.Contains(urls, in.URL):
		return failf(codeInvalidRequest, "url %q is not served in a batch (use one of %q)", in.URL, urls)
	}
	body := bytes.TrimLeft(in.Body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return failf(codeInvalidRequest, "body must be a JSON object")
	}
	var st struct {
		Stream json.RawMessage `json:"stream"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return failf(codeInvalidRequest, "body: %v", err)
	}
	if string(st.Stream) == "true" {
		return failf(codeStreamRefused, "\"stream\": true is not supported in a batch (each result is one line)")
	}
	r.url, r.body = in.URL, body
	return r
}

// key identifies a request across runs: its custom_id, or for a line
// without one, its line number (so its error line is not written twice
// either).
func (r *request) key() string {
	if r.customID != "" {
		return "c:" + r.customID
	}
	return "i:" + lineID(r.line)
}

// ids returns the output line's "id" and the response's "request_id",
// derived from the key so that reruns and shards agree.
func (r *request) ids() (id, requestID string) {
	src := "c:" + r.customID
	if r.customID == "" {
		src = "l:" + strconv.Itoa(r.line)
	}
	sum := sha256.Sum256([]byte(src))
	return "batch_req_" + hex.EncodeToString(sum[:12]), "req_" + hex.EncodeToString(sum[12:24])
}

// lineID is the "id" of the line at index line when it has no custom_id.
func lineID(line int) string {
	r := request{line: line}
	id, _ := r.ids()
	return id
}

// isBlank reports whether a line holds only white space.
func isBlank(b []byte) bool {
	return len(bytes.TrimSpace(b)) == 0
}
