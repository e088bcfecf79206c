// Package batchjob runs a file of API requests through an http.Handler in
// process, in the OpenAI Batch API file format (the one vLLM's run-batch
// reads too), and appends one result line per request to an output file.
//
// Each input line is {"custom_id", "method": "POST", "url", "body"}; each
// output line is {"id", "custom_id", "response": {"status_code",
// "request_id", "body"}, "error"}. A request the handler answered, whatever
// its status, has a response and a null error; a line that could not be sent
// (not JSON, no custom_id, a method or URL the job does not serve, a body
// that is not an object, "stream": true, longer than the line limit) has a
// null response and an error {"code", "message"}. A bad line never stops
// the job.
//
// The output is the job's journal. Every result is appended as one whole
// line with one write to a file opened with O_APPEND, and synced to disk
// periodically, so a run killed at any moment, SIGKILL included, leaves
// whole lines and at most one torn last line. A rerun with the same output
// drops that torn tail, skips every request already written and appends
// the rest: the requests in flight at the kill are the only work lost, and
// no line is ever written twice.
//
// Results are keyed by custom_id (a line without a usable one by its line
// number), and the output's "id" and "request_id" are derived from that
// key, so reruns and shards produce the same lines. Whatever the handler
// puts in its body (a response "id", a "created" time) is its own: a
// deterministic handler gives byte-identical results, a real server gives
// results equal up to those fields.
package batchjob

import (
	"errors"
	"io"
	"time"
)

// Errors returned by Run, for errors.Is.
var (
	// ErrBadOptions: Options are inconsistent (a shard out of range, a
	// negative limit, the input and output the same file).
	ErrBadOptions = errors.New("bad batch options")
	// ErrBadInput: the input file as a whole is unusable: it cannot be
	// read, or two lines share a custom_id. (One bad line is not an
	// error: it gets an error line.)
	ErrBadInput = errors.New("bad batch input")
	// ErrBadOutput: the output file holds a complete line that is not a
	// result line, so appending to it could mix two jobs; or another
	// process holds it.
	ErrBadOutput = errors.New("bad batch output")
)

// DefaultURLs are the endpoints a job sends requests to when Options.URLs
// is empty.
var DefaultURLs = []string{"/v1/chat/completions", "/v1/completions"}

// Options configure Run.
type Options struct {
	// Input is the path of the requests file (JSONL). It is read twice
	// (once to check custom_ids and count, once to send), so it must be a
	// regular file that does not change during the job.
	Input string
	// Output is the path of the results file. It is created if missing;
	// if it exists, the requests it already holds are skipped.
	Output string
	// Shard and Shards select the input lines whose 0-based index is
	// Shard mod Shards (blank lines count), so Shards machines split one
	// job. Shards 0 means 1.
	Shard, Shards int
	// Concurrency is the number of requests in flight at once; 0 means
	// 1. Requests in flight share the model's passes.
	Concurrency int
	// URLs are the request paths the job accepts; empty means
	// DefaultURLs.
	URLs []string
	// MaxLineBytes bounds one input line; 0 means 16 MiB. A longer line
	// gets an error line.
	MaxLineBytes int
	// MaxResponseBytes bounds one response body; 0 means 64 MiB. A longer
	// response gets an error line.
	MaxResponseBytes int
	// SyncEvery is the most time a written line waits for an fsync of the
	// output; 0 means one second. (A killed process loses nothing written;
	// the syncs bound what a machine crash loses.)
	SyncEvery time.Duration
	// Progress, if not nil, receives a progress line: done/total, failed,
	// tokens/s and ETA.
	Progress io.Writer
	// ProgressTerminal redraws the line in place, with a bar, as on a
	// terminal.
	ProgressTerminal bool
	// ProgressEvery is the period of the plain lines written when
	// ProgressTerminal is false (one more comes at the end); 0 means 30 s.
	ProgressEvery time.Duration
	// ProgressDetail, if not nil, adds to every progress line what the
	// handler's model is doing (passes, bytes read): a request can run
	// for minutes, and the count of finished ones alone looks hung.
	ProgressDetail func() string

	// GroupPrefixes makes the requests that share a header (the same
	// tools and leading system or developer messages, see groupKey) wait
	// for the first of them to finish before they start, so that a model
	// with a prefix cache prefills the header once. Requests of different
	// headers run concurrently as before.
	GroupPrefixes bool

	// writeLine replaces the write of each output line (the crash tests
	// die inside one with it); nil writes to the file.
	writeLine lineWriter
}

// Summary describes one run.
type Summary struct {
	// Lines is the number of lines in the input; Selected the non-blank
	// lines of this shard.
	Lines, Selected int
	// Skipped is the number of selected requests already in the output
	// before the run; Written the number of lines this run appended.
	Skipped, Written int
	// Failed counts the written lines that are errors or responses with a
	// status other than 2xx.
	Failed int
	// Foreign counts the output's lines that match no selected request
	// (another shard's or another input's results in the same file).
	Foreign int
	// Truncated is the number of bytes of a torn last line dropped from
	// the output before appending.
	Truncated int64
	// CompletionTokens sums usage.completion_tokens over this run's
	// successful responses.
	CompletionTokens int64
	// Elapsed is the run's wall time.
	Elapsed time.Duration
}

func (o *Options) withDefaults() Options {
	c := *o
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if len(c.URLs) == 0 {
		c.URLs = DefaultURLs
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = 16 << 20
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 64 << 20
	}
	if c.SyncEvery == 0 {
		c.SyncEvery = time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 30 * time.Second
	}
	return c
}
