package testmodel

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestDir(t *testing.T) {
	a, b := Dir(t), Dir(t)
	if a != b {
		t.Fatalf("two directories: %s, %s", a, b)
	}
	for _, name := range []string{"config.json", "tiktoken.model", "tokenizer_config.json", "model.safetensors.index.json"} {
		if _, err := os.Stat(filepath.Join(a, name)); err != nil {
			t.Error(err)
		}
	}
}

// TestCached: written once under the cache directory, with one message,
// then reused; concurrent callers agree; the files are the same as Dir's.
func TestCached(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	ctx := context.Background()
	var log bytes.Buffer
	d, err := Cached(ctx, &log)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := Version()
	if !strings.HasPrefix(d, cache) || filepath.Base(d) != "quickstart-"+v || !strings.Contains(log.String(), d) {
		t.Fatalf("dir %s, log %q", d, log.String())
	}
	log.Reset()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			d2, err := Cached(ctx, &log)
			if err != nil || d2 != d {
				t.Errorf("again: %s, %v", d2, err)
			}
		})
	}
	wg.Wait()
	if log.Len() != 0 {
		t.Errorf("rewritten: %q", log.String())
	}
	ents, _ := os.ReadDir(filepath.Dir(d))
	if len(ents) != 1 {
		t.Errorf("cache holds %d entries", len(ents))
	}
	for _, name := range []string{"config.json", "tiktoken.model", "model-00001-of-00001.safetensors"} {
		x, _ := os.ReadFile(filepath.Join(d, name))
		y, _ := os.ReadFile(filepath.Join(Dir(t), name))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs from Dir's", name)
		}
	}
	// A damaged entry is reported, not used.
	os.Remove(filepath.Join(d, "tiktoken.model"))
	if _, err := Cached(ctx, nil); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("damaged cache: %v", err)
	}
	// Concurrent first writers: one rename wins, the others use it.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dirs := make([]string, 4)
	for i := range dirs {
		wg.Go(func() {
			var err error
			if dirs[i], err = Cached(ctx, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, x := range dirs {
		if x != dirs[0] || !complete(x) {
			t.Errorf("concurrent writers: %v", dirs)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(dirs[0])); len(ents) != 1 {
		t.Errorf("%d entries left after concurrent writes", len(ents))
	}
}
