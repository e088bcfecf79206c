package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/progress"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestWatchCounts: a prompt fed in several passes is counted as the
// passes feed it (a given length, or the step's own), the decoding steps
// after it are not prompt tokens, the generated tokens are counted by
// Token, and the status says so; Idle empties it.
func TestWatchCounts(t *testing.T) {
	m, err := k3.Open(testmodel.Dir(t), k3.Options{MaxBatch: 4, MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var errb bytes.Buffer
	x := NewWatch(m, &errb, progress.Off)
	defer x.Close()
	prompt := []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	for _, n := range []int{len(prompt), 0} {
		x.Start()
		ctx := x.Prefill(context.Background(), n)
		for _, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: 5}) {
			if err != nil {
				t.Fatal(err)
			}
			x.Token()
		}
		x.mu.Lock()
		fed, total, tokens := x.fed, x.total, x.tokens
		x.mu.Unlock()
		if fed != 10 || total != 10 || tokens != 5 {
			t.Fatalf("prompt given as %d tokens: fed %d of %d, %d tokens; want 10 of 10 and 5", n, fed, total, tokens)
		}
		if s := x.Status(); !strings.HasPrefix(s, "decode 5 tokens") || strings.Contains(s, "prefill") {
			t.Fatalf("status %q", s)
		}
	}
	x.Idle()
	if s := x.Status(); s != "" {
		t.Fatalf("idle status %q", s)
	}
	if errb.Len() != 0 {
		t.Fatalf("progress off wrote %q", errb.String())
	}
}

// TestWatchEstimate: before a pass has ended, a prompt one pass holds is
// expected to read the plan's trunk per pass and the experts of uniform
// routing over its rows, less the cache's share, and its time left comes
// from that at the rate so far; a longer one waits for its first pass.
// After passes, the passes left at their time and rows so far.
func TestWatchEstimate(t *testing.T) {
	x := &Watch{plan: &k3.MemoryPlan{Rows: 100, TrunkBytesPerPass: 1000, CacheSlots: 0, CacheSlotBytes: 10},
		cfg: k3.Config{Experts: 8, TopK: 8, MoELayers: 2}, total: 80}
	// Every pass reads the trunk and all 8 experts of both layers: 1160
	// bytes.
	if got := x.passBytes(80); got != 1160 {
		t.Fatalf("pass bytes %v, want 1160", got)
	}
	left, ok := x.prefillLeft(290, 10*time.Second)
	if !ok || left != 30*time.Second {
		t.Fatalf("left %v %v, want 30s", left, ok)
	}
	x.total = 250
	if _, ok := x.prefillLeft(290, 10*time.Second); ok {
		t.Fatal("an estimate for a prompt of several passes before the first ended")
	}
	// Two passes of 100 rows in 20 s, the last just ended: 50 tokens
	// left, one more pass.
	x.start = time.Now().Add(-20 * time.Second)
	x.passes, x.passFed, x.fed, x.lastPass = 2, 200, 200, time.Now()
	if left, ok := x.prefillLeft(0, 20*time.Second); !ok || left > 10100*time.Millisecond || left < 9*time.Second {
		t.Fatalf("after two passes: left %v %v, want about 10s", left, ok)
	}
}

func TestDurationAndThousands(t *testing.T) {
	for d, want := range map[time.Duration]string{45 * time.Second: "45s", 190 * time.Second: "3m10s", 2*time.Hour + 5*time.Minute: "2h05m"} {
		if got := Duration(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int]string{7: "7", 1000: "1,000", 163840: "163,840", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}

// TestCheckpointFiles says what a header-only read of a checkpoint reads.
func TestCheckpointFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.safetensors", "b.safetensors", "config.json"} {
		if err := os.WriteFile(filepath.Join(dir, n), make([]byte, 1500000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := CheckpointFiles(dir), "the config and 2 shard headers in "+dir+" (3.0 MB of weights, not read)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	var s *Steps
	s.Step("nothing")
	s.Done()
	var out bytes.Buffer
	s = NewSteps(&out, progress.Off)
	s.Step("reading %d things", 3)
	s.Done()
	if out.Len() != 0 {
		t.Fatalf("--progress off wrote %q", out.String())
	}
}
