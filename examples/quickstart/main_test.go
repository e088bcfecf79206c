package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestMain(m *testing.M) { testmodel.Main(m) }

// TestQuickstart runs the example as go run would, writing its own
// checkpoint, then on the shared quickstart checkpoint with --model, where
// the output must be the prompt and GenerateText's greedy continuation.
func TestQuickstart(t *testing.T) {
	ctx := context.Background()
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"--max-tokens", "12"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !strings.HasPrefix(out.String(), "Once upon a time") || len(out.String()) <= len("Once upon a time\n") {
		t.Errorf("output %q", out.String())
	}
	if !strings.Contains(errb.String(), "wrote a tiny synthetic checkpoint") || !strings.Contains(errb.String(), "13 layers") {
		t.Errorf("stderr %q", errb.String())
	}

	dir := testmodel.Dir(t)
	m, err := k3.Open(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want, err := m.GenerateText(ctx, "Hello", k3.GenerateOptions{MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"--model", dir, "--prompt", "Hello", "--max-tokens", "12"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if out.String() != "Hello"+want+"\n" {
		t.Errorf("--model: %q, want %q", out.String(), "Hello"+want+"\n")
	}
	if err := run(ctx, []string{"--bogus"}, &out, &errb); err == nil {
		t.Error("a bad flag was accepted")
	}
}
