//go:build unix

package iox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noHang fails the test if f does not return promptly: opening a FIFO
// used to block until a writer appeared.
func noHang(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("blocked")
		return nil
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

// TestOpenRegularOnly: FIFOs, devices and directories are refused without
// blocking or reading; a symlink to a regular file is fine.
func TestOpenRegularOnly(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "file")
	os.WriteFile(reg, []byte("hello"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(reg, link)
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	zero := filepath.Join(dir, "zero")
	os.Symlink("/dev/zero", zero)

	for _, p := range []string{reg, link} {
		b, err := ReadFileLimit(p, 5)
		if err != nil || string(b) != "hello" {
			t.Fatalf("%s: got %q, %v", p, b, err)
		}
		f, err := OpenFile(p, FileOptions{Direct: true})
		if err != nil {
			t.Fatalf("OpenFile %s: %v", p, err)
		}
		f.Close()
	}
	for _, p := range []string{fifo, zero, dir} {
		err := noHang(t, func() error { _, err := ReadFileLimit(p, 1<<20); return err })
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFileLimit %s: got %v, want ErrNotRegular", p, err)
		}
		err = noHang(t, func() error { _, err := OpenFile(p, FileOptions{Direct: true}); return err })
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("OpenFile %s: got %v, want ErrNotRegular", p, err)
		}
	}
	// A sparse 100 MB file is refused from its size, before any read.
	big := filepath.Join(dir, "big")
	os.WriteFile(big, nil, 0o644)
	os.Truncate(big, 100<<20)
	if _, err := ReadFileLimit(big, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("100 MB file: got %v, want ErrTooLarge", err)
	}
	if _, err := ReadFileLimit(reg, 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("5 bytes with a 4-byte limit: got %v", err)
	}
}

// TestCheckpointHostileFiles: a FIFO named like a shard or the index, a
// shard that is a device, headers over the limit for all shards together,
// and a cancelled context all fail OpenCheckpointContext at once.
func TestCheckpointHostileFiles(t *testing.T) {
	good := header(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4})
	cases := map[string]func(dir string){
		"FIFO shard": func(dir string) { mkfifo(t, filepath.Join(dir, "model-00002.safetensors")) },
		"FIFO index": func(dir string) { mkfifo(t, filepath.Join(dir, IndexFile)) },
		"device shard": func(dir string) {
			os.Symlink("/dev/zero", filepath.Join(dir, "model-00002.safetensors"))
		},
	}
	for name, setup := range cases {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "model-00001.safetensors"), good, 0o644)
		setup(dir)
		err := noHang(t, func() error { _, err := OpenCheckpoint(dir); return err })
		if !errors.Is(err, ErrCheckpoint) || !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: got %v, want ErrCheckpoint and ErrNotRegular", name, err)
		}
	}

	// Three shards whose headers are each under the per-file limit but
	// together above the total.
	dir := t.TempDir()
	for i, n := range []string{"a", "b", "c"} {
		js := `{"` + n + `":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`
		os.WriteFile(filepath.Join(dir, "model-0000"+string(rune('1'+i))+".safetensors"), header(js, []byte{1, 2, 3, 4}), 0o644)
	}
	if _, err := OpenCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	old := totalHeaderLimit
	totalHeaderLimit = 2*int64(len(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`)) + 10
	_, err := OpenCheckpoint(dir)
	totalHeaderLimit = old
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "all shards together") {
		t.Errorf("headers over the total: got %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := OpenCheckpointContext(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}
