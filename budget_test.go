package k3_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/rss"
	"github.com/k3go/k3/internal/synth"
)

// wideProfile is a synthetic checkpoint of 8 layers × 64 experts, wide
// enough (about 250 MB) that its weights are much larger than the smallest
// budget that runs it.
func wideProfile() synth.Profile {
	p := synth.Tiny()
	p.Name = "custom"
	p.SetLayers(8)
	c := &p.Config
	c.Hidden, c.Vocab = 1024, 4096
	c.KDAHeads, c.KDAHeadDim = 8, 64
	c.MLAHeads, c.QLoraRank, c.KVLoraRank = 8, 256, 128
	c.Experts, c.TopK, c.LatentDim, c.MoEIntermediate = 64, 8, 512, 512
	c.DenseIntermediate, c.AttnResBlock = 1024, 4
	return p
}

var (
	wideOnce sync.Once
	wideDir  string
	wideErr  error
)

// wideCheckpoint writes the wide synthetic checkpoint once per test binary.
func wideCheckpoint(t *testing.T) string {
	t.Helper()
	wideOnce.Do(func() {
		dir, err := os.MkdirTemp("", "k3-wide-")
		if err != nil {
			wideErr = err
			return
		}
		wideDir = dir + "/ckpt"
		_, wideErr = synth.Write(context.Background(), wideDir, wideProfile(), synth.WriteOptions{})
	})
	if wideErr != nil {
		t.Fatal(wideErr)
	}
	return wideDir
}

// removeWide runs the tests, then removes the wide checkpoint.
type removeWide struct{ m *testing.M }

func (r removeWide) Run() int {
	code := r.m.Run()
	if wideDir != "" {
		os.RemoveAll(wideDir + "/..")
	}
	return code
}

// rssChild runs in a fresh process: open with a budget, generate, report
// the peak RSS as JSON on stdout.
func rssChild(spec string) int {
	var dir string
	var budget int64
	if _, err := fmt.Sscanf(spec, "%s %d", &dir, &budget); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	m, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: 64})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	prompt := []int{1, 2, 3, 4, 5, 6, 7, 8}
	for _, err := range m.Generate(context.Background(), prompt, k3.GenerateOptions{MaxTokens: 6}) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	st := m.Stats()
	json.NewEncoder(os.Stdout).Encode(map[string]int64{"peak": rss.Peak(), "planned": st.PlannedBytes, "read": st.BytesRead})
	m.Close()
	return 0
}

// rssSlack is the documented constant by which peak RSS may exceed the
// budget: the test binary's own text and data, which the plan cannot see.
const rssSlack = 16 << 20

// TestPeakRSSWithinBudget runs a checkpoint several times larger than its
// budget in a subprocess and checks that the process's peak RSS stays
// within the budget plus rssSlack, while the run really streamed.
func TestPeakRSSWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 250 MB checkpoint")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory counts in the RSS")
	}
	dir := wideCheckpoint(t)
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	total := in.Sizes.TrunkBuffers + in.Sizes.Experts*in.Sizes.ExpertBytes + in.Sizes.LMHead + in.Sizes.Embed
	for _, budget := range []int64{in.FloorBytes, in.FloorBytes + (total-in.FloorBytes)/4} {
		if budget >= total {
			t.Fatalf("budget %d is not smaller than the checkpoint's weights %d", budget, total)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "K3_RSS_CHILD="+dir+" "+strconv.FormatInt(budget, 10))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child with budget %d: %v\n%s", budget, err, out)
		}
		var r map[string]int64
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("child output %q: %v", out, err)
		}
		t.Logf("budget %s (weights %s): peak RSS %s, planned %s, read %s",
			human(budget), human(total), human(r["peak"]), human(r["planned"]), human(r["read"]))
		if r["peak"] > budget+rssSlack {
			t.Errorf("budget %d: peak RSS %d exceeds budget + %d", budget, r["peak"], rssSlack)
		}
		if r["read"] < total/2 {
			t.Errorf("budget %d: only %d bytes read; the run did not stream", budget, r["read"])
		}
	}
}

func human(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// TestBudgetInvarianceWide checks bit-identical logits across three
// budgets (the smallest accepted, a middle one, everything resident) and
// 1 and 4 threads on a synthetic checkpoint of 8 layers × 64 experts.
func TestBudgetInvarianceWide(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 250 MB checkpoint")
	}
	dir := wideCheckpoint(t)
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{5, 77, 1023, 4000, 12, 9, 300, 2048, 1, 0, 4095, 64}
	var ref []float32
	for _, budget := range []int64{in.FloorBytes, (in.FloorBytes + in.FullBytes) / 2, 0} {
		for _, threads := range []int{1, 4} {
			m, err := k3.Open(dir, k3.Options{RAMBudget: budget, Threads: threads, MaxContext: 64})
			if err != nil {
				t.Fatalf("budget %d: %v", budget, err)
			}
			got, err := m.NewSession().Logits(context.Background(), ids)
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			if ref == nil {
				ref = got
				continue
			}
			for i := range ref {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("budget %d threads %d: logit %d = %v, want %v", budget, threads, i, got[i], ref[i])
				}
			}
		}
	}
}

// TestSessionsWithinBudget checks that under a budget only Options.Sessions
// sessions hold state at once: one more fails with ErrBudget until one is
// closed; Model.Generate releases its session when it ends.
func TestSessionsWithinBudget(t *testing.T) {
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: 60e6, MaxContext: 64, Sessions: 2})
	ctx := context.Background()
	a, b, c := m.NewSession(), m.NewSession(), m.NewSession()
	for _, s := range []*k3.Session{a, b} {
		if _, err := s.Step(ctx, exp.PromptIDs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Step(ctx, exp.PromptIDs); !errors.Is(err, k3.ErrBudget) {
		t.Fatalf("a third session under Sessions=2: %v, want ErrBudget", err)
	}
	a.Close()
	if _, err := c.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatalf("after closing one: %v", err)
	}
	b.Close()
	for i := 0; i < 3; i++ { // each Generate takes and returns a place
		for _, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 2}) {
			if err != nil {
				t.Fatalf("Generate %d: %v", i, err)
			}
		}
	}
	// A closed session is empty and can be used again.
	if a.Len() != 0 {
		t.Fatalf("closed session holds %d tokens", a.Len())
	}
	c.Close()
	if _, err := a.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatalf("reusing a closed session: %v", err)
	}
}
