package batchjob

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRun: the runner's own cost per request (read, parse, dispatch
// in process, encode, append, periodic fsync), with a handler that answers
// at once. A model takes seconds per request; this is what is left.
func BenchmarkRun(b *testing.B) {
	const n = 2000
	in := writeInput(b, n)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"object":"text_completion","choices":[{"text":"hello world","index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	})
	dir := b.TempDir()
	for b.Loop() {
		out := filepath.Join(dir, "out.jsonl")
		os.Remove(out)
		if _, err := Run(context.Background(), h, Options{Input: in, Output: out, Concurrency: 8}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1e3, "µs/request")
}
