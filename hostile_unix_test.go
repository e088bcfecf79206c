//go:build unix

package k3_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestHostileFiles opens copies of the oracle with one file replaced by
// something that must never be read whole or waited on: Open fails at once
// with the file's sentinel, never hangs, never runs out of memory.
func TestHostileFiles(t *testing.T) {
	fifo := func(t *testing.T, p string) {
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	cases := []struct {
		name  string
		src   string
		setup func(t *testing.T, dir string)
		want  error
	}{
		{"config.json → /dev/zero", "oracle/tiny-mxfp4", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
			os.Symlink("/dev/zero", filepath.Join(dir, "config.json"))
		}, k3.ErrBadConfig},
		{"config.json of 100 MB", "oracle/tiny-mxfp4", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "config.json"), 100<<20)
		}, k3.ErrBadConfig},
		{"config.json a FIFO", "oracle/tiny-mxfp4", func(t *testing.T, dir string) { fifo(t, filepath.Join(dir, "config.json")) }, k3.ErrBadConfig},
		{"shard a FIFO", "oracle/tiny-mxfp4", func(t *testing.T, dir string) { fifo(t, filepath.Join(dir, "model.safetensors")) }, k3.ErrBadCheckpoint},
		{"extra shard a FIFO", "oracle/tiny-f32", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "model-00003-of-00003.safetensors"))
		}, k3.ErrBadCheckpoint},
		{"index a FIFO", "oracle/tiny-f32", func(t *testing.T, dir string) { fifo(t, filepath.Join(dir, "model.safetensors.index.json")) }, k3.ErrBadCheckpoint},
		{"tiktoken.model a FIFO", "oracle/tiny-mxfp4", func(t *testing.T, dir string) { fifo(t, filepath.Join(dir, "tiktoken.model")) }, k3.ErrBadCheckpoint},
		{"generation_config.json a FIFO", "oracle/tiny-mxfp4", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "generation_config.json"))
		}, k3.ErrBadConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, fixtures.Path(t, c.src))
			c.setup(t, dir)
			err := within(t, "Open", func() error {
				m, err := k3.Open(dir, k3.Options{MaxContext: 64})
				if err == nil {
					m.Close()
				}
				return err
			})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// TestUnreadableConfig: a config.json that exists but cannot be read is an
// I/O error (exit code 6), not a bad config (3).
func TestUnreadableConfig(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	dir := copyDir(t, fixtures.Path(t, "oracle/tiny-mxfp4"))
	os.Chmod(filepath.Join(dir, "config.json"), 0)
	_, err := k3.Open(dir, k3.Options{MaxContext: 64})
	if !errors.Is(err, os.ErrPermission) || errors.Is(err, k3.ErrBadConfig) {
		t.Fatalf("got %v, want a permission error that is not ErrBadConfig", err)
	}
}

// TestOpenChecks: a tokenizer with more ids than the model's vocabulary is
// refused at Open, not when a generation meets such an id; a cancelled
// context stops Open.
func TestOpenChecks(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4") // vocabulary 256
	_, err := k3.Open(src, k3.Options{MaxContext: 64, TokenizerDir: fixtures.Path(t, "tokenizer")})
	if !errors.Is(err, k3.ErrBadCheckpoint) || !strings.Contains(err.Error(), "the tokenizer has") {
		t.Fatalf("tokenizer larger than the vocabulary: got %v, want ErrBadCheckpoint", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k3.OpenContext(ctx, src, k3.Options{MaxContext: 64}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Open: got %v", err)
	}
}
