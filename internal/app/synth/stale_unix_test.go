//go:build unix

package synth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3/iox"
)

// TestStaleTemporaryFiles: the temporary files of a killed k3 synth (its
// lock died with it) never block the next run, which removes them; while
// another writer holds the directory, nothing is removed; any other file
// still makes the directory off limits.
func TestStaleTemporaryFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	stale := filepath.Join(dir, tempName("model.safetensors"))
	os.WriteFile(stale, []byte("half a shard"), 0o644)

	unlock, err := iox.LockDir(dir) // a writer still running
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(ctx, dir, Tiny(), WriteOptions{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("while another writer holds the directory: got %v, want ErrNotEmpty", err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("a live writer's temporary file was removed: %v", err)
	}
	unlock() // the writer was killed

	if _, err := Write(ctx, dir, Tiny(), WriteOptions{}); err != nil {
		t.Fatalf("after a killed run: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale temporary file is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err != nil {
		t.Fatalf("no checkpoint written: %v", err)
	}

	other := t.TempDir()
	os.WriteFile(filepath.Join(other, tempName("a")), nil, 0o644)
	os.WriteFile(filepath.Join(other, "notes.txt"), nil, 0o644)
	if _, err := Write(ctx, other, Tiny(), WriteOptions{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("temporary files next to a user's file: got %v, want ErrNotEmpty", err)
	}
	if _, err := os.Stat(filepath.Join(other, tempName("a"))); err != nil {
		t.Fatal("a file was removed from a directory that was refused")
	}
}
