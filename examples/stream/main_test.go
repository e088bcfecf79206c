package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestMain(m *testing.M) { testmodel.Main(m) }

func runStream(t *testing.T, ctx context.Context, stdout *bytes.Buffer, args ...string) string {
	t.Helper()
	var errb bytes.Buffer
	if err := run(ctx, append([]string{"--model", testmodel.Dir(t)}, args...), stdout, &errb); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errb.String())
	}
	return errb.String()
}

// TestStream: breaking out of the loop, a deadline and a cancelled context
// each stop the generation early; with none, it runs to --max-tokens.
func TestStream(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	summary := runStream(t, ctx, &out, "--max-tokens", "20", "--verbose")
	if n := strings.Count(out.String(), "\n"); n != 20 || !strings.Contains(summary, "20 tokens") || !strings.Contains(summary, "max tokens") {
		t.Errorf("full run: %d lines, %q", n, summary)
	}
	full := out.String()

	out.Reset()
	summary = runStream(t, ctx, &out, "--max-tokens", "20", "--verbose", "--stop-after", "5")
	if got := tokenIDs(out.String()); strings.Count(got, ":") != 5 || !strings.HasPrefix(tokenIDs(full), got) || !strings.Contains(summary, "stopped by stop-after") {
		t.Errorf("--stop-after 5: %q, %q", out.String(), summary)
	}

	// A deadline that has passed before the first token: nothing comes.
	out.Reset()
	summary = runStream(t, ctx, &out, "--max-tokens", "20", "--timeout", "1ns")
	if !strings.Contains(summary, "0 tokens") || !strings.Contains(summary, "stopped by deadline") {
		t.Errorf("--timeout 1ns: %q", summary)
	}

	// The caller's context cancelled after the third token (by the writer
	// that receives it): the generation ends with context.Canceled.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &cancelAfter{n: 3, cancel: cancel}
	var errb bytes.Buffer
	if err := run(cctx, []string{"--model", testmodel.Dir(t), "--max-tokens", "200", "--verbose"}, w, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errb.String(), "stopped by cancelled") || w.lines < 3 || w.lines > 4 {
		t.Errorf("cancelled after 3 tokens: %d tokens, %q", w.lines, errb.String())
	}
}

// tokenIDs returns the index and id columns of --verbose output.
func tokenIDs(verbose string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(verbose), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			b.WriteString(f[0] + ":" + f[1] + " ")
		}
	}
	return b.String()
}

// cancelAfter is a writer that cancels a context once it has received n
// lines.
type cancelAfter struct {
	mu     sync.Mutex
	n      int
	lines  int
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines += bytes.Count(p, []byte("\n"))
	if c.lines >= c.n {
		c.cancel()
	}
	return len(p), nil
}
