// Package testmodel provides the quickstart checkpoint (synth.Quickstart:
// the tiny Kimi K3 model with a 512-token vocabulary and a generated
// tokenizer, about 4 MB, random weights) to tests, examples and the
// command's quick start.
//
// Tests call Dir, which writes the checkpoint once per test binary into a
// temporary directory; a package whose tests use it removes that directory
// by calling Main from its TestMain. Programs call Cached, which writes it
// once per machine under the user's cache directory and reuses it.
package testmodel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

var (
	once    sync.Once
	tempDir string // holds the checkpoint in "quickstart"
	dir     string
	err     error
)

// Path returns the directory of the quickstart checkpoint, written on the
// first call into a new temporary directory. Main removes it.
func Path() (string, error) {
	once.Do(func() {
		tempDir, err = os.MkdirTemp("", "k3-testmodel-*")
		if err != nil {
			return
		}
		d := filepath.Join(tempDir, "quickstart")
		if _, err = synth.Write(context.Background(), d, synth.Quickstart(), synth.WriteOptions{Buffered: true}); err == nil {
			dir = d
		}
	})
	return dir, err
}

// TB is the part of testing.TB that Dir uses. (The package does not
// import testing, so that the k3 command, which uses Cached, does not
// link it.)
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Dir is Path for tests: it fails the test if the checkpoint cannot be
// written. tb is a *testing.T, *testing.B or *testing.F.
func Dir(tb TB) string {
	tb.Helper()
	d, err := Path()
	if err != nil {
		tb.Fatalf("testmodel: writing the quickstart checkpoint: %v", err)
	}
	return d
}

// Main runs the tests and examples of m (a *testing.M), removes the
// checkpoint written by Path or Dir, and exits with the tests' status. Call
// it from TestMain.
func Main(m interface{ Run() int }) {
	// The user's cache directory (os.UserCacheDir: the quickstart
	// checkpoint, the prefix cache k3 serve and k3 batch keep by default)
	// is a temporary one for the tests and the commands they run, so that
	// a test run neither reads nor leaves anything there.
	// The go command's build cache stays where it was (a test that
	// builds the command must not rebuild the world).
	if os.Getenv("GOCACHE") == "" {
		if dir, err := os.UserCacheDir(); err == nil {
			os.Setenv("GOCACHE", filepath.Join(dir, "go-build"))
		}
	}
	cache, err := os.MkdirTemp("", "k3-test-cache-")
	if err == nil {
		os.Setenv("XDG_CACHE_HOME", cache)
	}
	code := m.Run()
	if cache != "" {
		os.RemoveAll(cache)
	}
	fixtures.Report()
	if tempDir != "" {
		os.RemoveAll(tempDir)
	}
	os.Exit(code)
}

// Version identifies the quickstart checkpoint's content: a hash of its
// config.json (which records the synthetic generator's version) and of its
// tokenizer files. Cached keeps one directory per version.
func Version() (string, error) {
	p := synth.Quickstart()
	L, err := synth.PlanLayout(p, 0)
	if err != nil {
		return "", err
	}
	model, config, err := synth.GenerateTokenizer(p.Config.Vocab)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, b := range [][]byte{L.ConfigJSON(), model, config, synth.GenerationConfig(p.Config.Vocab)} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// Cached returns the quickstart checkpoint kept under the user's cache
// directory (os.UserCacheDir()/k3/quickstart-VERSION, or the temporary
// directory if there is no cache directory), writing it first if it is
// absent. log, if not nil, hears one line when it is written. Writing goes
// to a temporary directory renamed into place, so concurrent callers and
// interrupted runs never see a partial checkpoint.
func Cached(ctx context.Context, log io.Writer) (string, error) {
	v, err := Version()
	if err != nil {
		return "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	parent := filepath.Join(base, "k3")
	final := filepath.Join(parent, "quickstart-"+v)
	if complete(final) {
		return final, nil
	}
	if _, err := os.Stat(final); err == nil {
		return "", fmt.Errorf("testmodel: %s is incomplete; remove it and try again", final)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("testmodel: %w", err)
	}
	if log != nil {
		fmt.Fprintf(log, "k3: writing the quickstart checkpoint (a tiny synthetic model with random weights) to %s\n", final)
	}
	tmp, err := os.MkdirTemp(parent, ".quickstart-"+v+"-*")
	if err != nil {
		return "", fmt.Errorf("testmodel: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if _, err := synth.Write(ctx, tmp, synth.Quickstart(), synth.WriteOptions{Buffered: true}); err != nil {
		return "", fmt.Errorf("testmodel: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if complete(final) { // another process got there first
			return final, nil
		}
		return "", fmt.Errorf("testmodel: %w", err)
	}
	return final, nil
}

// complete reports whether dir holds a whole checkpoint: synth.Write
// publishes config.json last, and Cached renames whole directories.
func complete(dir string) bool {
	for _, name := range []string{synth.ConfigFile, "tiktoken.model", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}
