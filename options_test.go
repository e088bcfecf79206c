package k3_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestOptionErrors: Open refuses a bad option field by field, before it
// reads anything: an *OptionError naming the field and the value, wrapping
// ErrBadOptions, in words (never a dump of the struct); Inspect alike.
func TestOptionErrors(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct {
		opts  k3.Options
		field string
		value string
	}{
		{k3.Options{RAMBudget: -1}, "RAMBudget", "-1"},
		{k3.Options{Threads: -1}, "Threads", "-1"},
		{k3.Options{Threads: 1 << 20}, "Threads", "1048576"},
		{k3.Options{MaxContext: -1}, "MaxContext", "-1"},
		{k3.Options{PrefillChunk: -3}, "PrefillChunk", "-3"},
		{k3.Options{Sessions: -2}, "Sessions", "-2"},
		{k3.Options{Sessions: 1 << 30}, "Sessions", "1073741824"},
		{k3.Options{MaxBatch: -1}, "MaxBatch", "-1"},
		{k3.Options{Speculate: -2}, "Speculate", "-2"},
		{k3.Options{Speculate: 1000}, "Speculate", "1000"},
		{k3.Options{IOQueueDepth: -8}, "IOQueueDepth", "-8"},
		{k3.Options{IOQueueDepth: 1 << 20}, "IOQueueDepth", "1048576"},
		{k3.Options{TrunkCompression: 7}, "TrunkCompression", "7"},
		{k3.Options{MaxContext: 64, AutoContext: true}, "AutoContext", "true"},
		{k3.Options{TrunkDir: "/nonexistent/trunk"}, "TrunkDir", `"/nonexistent/trunk"`},
		{k3.Options{TokenizerDir: file}, "TokenizerDir", `"` + file + `"`},
		{k3.Options{PrefixCache: &k3.PrefixCacheOptions{BlockTokens: -1}}, "PrefixCache.BlockTokens", "-1"},
		{k3.Options{PrefixCache: &k3.PrefixCacheOptions{CheckpointBlocks: -1}}, "PrefixCache.CheckpointBlocks", "-1"},
		{k3.Options{Cluster: &k3.ClusterOptions{Timeout: -time.Second}}, "Cluster.Timeout", "-1s"},
	} {
		_, err := k3.Open(dir, c.opts)
		_, ierr := k3.Inspect(dir, c.opts)
		for what, err := range map[string]error{"Open": err, "Inspect": ierr} {
			var oe *k3.OptionError
			if !errors.As(err, &oe) || !errors.Is(err, k3.ErrBadOptions) || oe.Field != c.field {
				t.Errorf("%s(%+v): %v, want an *OptionError for %s wrapping ErrBadOptions", what, c.opts, err, c.field)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "Options."+c.field+" = "+c.value+": ") || strings.ContainsAny(msg, "{}") || oe.Reason == "" {
				t.Errorf("%s(%+v): %q does not name the field and the value, or dumps a struct", what, c.opts, msg)
			}
		}
	}
	if _, err := k3.Open(dir, k3.Options{Threads: 2, MaxContext: 64, PrefixCache: &k3.PrefixCacheOptions{RAMBytes: -1, DiskBytes: -1}}); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

// TestCheckpointDirErrors: a checkpoint directory that does not exist
// says so (and is fs.ErrNotExist), which an empty one (no config.json)
// and a file do not.
func TestCheckpointDirErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	empty := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct {
		dir  string
		is   error
		want string
	}{
		{missing, fs.ErrNotExist, "does not exist"},
		{empty, k3.ErrBadConfig, "has no config.json"},
		{file, k3.ErrBadOptions, "is not a directory"},
	} {
		_, err := k3.Open(c.dir, k3.Options{})
		_, ierr := k3.Inspect(c.dir, k3.Options{})
		for _, err := range []error{err, ierr} {
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.dir) {
				t.Errorf("%s: %v, want %v saying %q", c.dir, err, c.is, c.want)
			}
		}
	}
	if _, err := k3.Open(missing, k3.Options{}); strings.Contains(err.Error(), "does not exist") == strings.Contains(mustErr(k3.Open(empty, k3.Options{})), "does not exist") {
		t.Errorf("a missing and an empty directory get the same message")
	}
}

func mustErr(_ *k3.Model, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestContextTooLongForTheBudget: a context the budget cannot hold names
// MaxContext (not RAMBudget) and the most positions that fit, wrapping
// ErrBudget; that many open. A budget below the floor with any context is
// the budget's fault: a plain ErrBudget.
func TestContextTooLongForTheBudget(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	budget := in.FloorBytes + 4<<20
	_, err = k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: 100_000_000})
	var oe *k3.OptionError
	if !errors.As(err, &oe) || oe.Field != "MaxContext" || !errors.Is(err, k3.ErrBudget) || strings.Contains(err.Error(), "RAMBudget") {
		t.Fatalf("a context of 100,000,000: %v, want an *OptionError for MaxContext wrapping ErrBudget", err)
	}
	var most int
	if i := strings.Index(oe.Reason, "holds at most "); i < 0 {
		t.Fatalf("%q does not say how many positions fit", oe.Reason)
	} else if _, err := fmt.Sscan(oe.Reason[i+len("holds at most "):], &most); err != nil || most < 64 {
		t.Fatalf("%q: %d positions", oe.Reason, most)
	}
	m, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: most})
	if err != nil {
		t.Fatalf("the %d positions the error says fit: %v", most, err)
	}
	m.Close()
	if _, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: most + 1}); !errors.As(err, &oe) || oe.Field != "MaxContext" {
		t.Errorf("%d positions, one more than fit: %v", most+1, err)
	}
	_, err = k3.Open(dir, k3.Options{RAMBudget: in.FloorBytes / 2, MaxContext: 64})
	if !errors.Is(err, k3.ErrBudget) || errors.As(err, &oe) {
		t.Errorf("half the floor: %v, want a plain ErrBudget", err)
	}
}

// TestAutoContext: AutoContext gives the largest context the budget holds
// (Model.MaxContext reports it); one more position does not fit; a larger
// budget holds more; never less than the default context: below the floor
// Inspect reports (at 4096 positions) it is the budget's ErrBudget, as
// without AutoContext; the model's max_position_embeddings caps it.
func TestAutoContext(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	in, err := k3.Inspect(src, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = k3.Open(src, k3.Options{RAMBudget: in.FloorBytes - 1, AutoContext: true})
	var oe *k3.OptionError
	if !errors.Is(err, k3.ErrBudget) || errors.As(err, &oe) || !strings.Contains(err.Error(), "the floor needs") {
		t.Errorf("AutoContext one byte under the floor: %v, want the floor's ErrBudget", err)
	}
	prev := 4096
	for _, budget := range []int64{in.FloorBytes + 1<<20, in.FloorBytes + 16<<20} {
		m, err := k3.Open(src, k3.Options{RAMBudget: budget, AutoContext: true})
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		n := m.MaxContext()
		m.Close()
		if n <= prev {
			t.Errorf("budget %d: %d positions (a smaller budget: %d)", budget, n, prev)
		}
		prev = n
		if _, err := k3.Open(src, k3.Options{RAMBudget: budget, MaxContext: n + 1}); !errors.Is(err, k3.ErrBudget) {
			t.Errorf("budget %d: %d positions fit, more than AutoContext's %d: %v", budget, n+1, n, err)
		}
	}
	// The config's limit caps it, and a longer explicit context is refused.
	dir := copyDir(t, src)
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	raw = []byte(strings.Replace(string(raw), "{", `{"max_position_embeddings": 300,`, 1))
	os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
	m, err := k3.Open(dir, k3.Options{RAMBudget: in.FloorBytes + 16<<20, AutoContext: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := m.MaxContext(); n != 300 || m.Config().MaxPositions != 300 {
		t.Errorf("max_position_embeddings 300: context %d, Config().MaxPositions %d", n, m.Config().MaxPositions)
	}
	m.Close()
	if _, err := k3.Open(dir, k3.Options{MaxContext: 301}); !errors.As(err, &oe) || !errors.Is(err, k3.ErrBadOptions) || !strings.Contains(err.Error(), "300") {
		t.Errorf("MaxContext 301 > max_position_embeddings 300: %v", err)
	}
	if m, err := k3.Open(dir, k3.Options{MaxContext: 0}); err != nil || m.MaxContext() != 300 {
		t.Errorf("MaxContext 0 without AutoContext: %v, want the model's 300 (below the default 4096)", err)
	} else {
		m.Close()
	}
}
