package k3_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestPublicConfigAndPlan checks the root package's own Config against
// config.json read here, and that a MemoryPlan's counts add up: every
// layer part is pinned or streamed, nothing streams without a budget,
// something does at the floor.
func TestPublicConfigAndPlan(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Layers      int   `json:"num_hidden_layers"`
		Hidden      int   `json:"hidden_size"`
		Vocab       int   `json:"vocab_size"`
		Experts     int   `json:"num_experts"`
		TopK        int   `json:"num_experts_per_token"`
		FirstKDense int   `json:"first_k_dense_replace"`
		FullAttn    []int `json:"full_attn_layers"`
	}
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatal(err)
	}
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	c := in.Config
	want := k3.Config{Layers: js.Layers, MLALayers: len(js.FullAttn), KDALayers: js.Layers - len(js.FullAttn),
		DenseLayers: js.FirstKDense, MoELayers: js.Layers - js.FirstKDense, Hidden: js.Hidden, Vocab: js.Vocab,
		Experts: js.Experts, TopK: js.TopK}
	got := c
	got.KDAHeads, got.KDAHeadDim, got.MLAHeads, got.SharedExperts = 0, 0, 0, 0
	got.LatentDim, got.MoEIntermediate, got.DenseIntermediate = 0, 0, 0
	if got != want {
		t.Errorf("Config %+v, config.json says %+v", c, want)
	}
	if c.KDAHeads <= 0 || c.KDAHeadDim <= 0 || c.MLAHeads <= 0 || c.LatentDim <= 0 || c.MoEIntermediate <= 0 {
		t.Errorf("Config %+v has an empty width", c)
	}
	for _, budget := range []int64{0, in.FloorBytes} {
		mp, err := in.Plan(budget)
		if err != nil {
			t.Fatal(err)
		}
		if mp.PinnedParts+mp.StreamedParts != 2*c.Layers || mp.Budget != budget {
			t.Errorf("budget %d: %d pinned + %d streamed parts of %d layers, budget %d", budget, mp.PinnedParts, mp.StreamedParts, c.Layers, mp.Budget)
		}
		if mp.TotalBytes != mp.OffHeapBytes+mp.HeapBytes+mp.ExecutableBytes || mp.String() == "" {
			t.Errorf("budget %d: total %d != off-heap %d + heap %d + executable %d", budget, mp.TotalBytes, mp.OffHeapBytes, mp.HeapBytes, mp.ExecutableBytes)
		}
		if streams := mp.StreamedParts > 0; streams != (budget > 0) {
			t.Errorf("budget %d: %d parts stream", budget, mp.StreamedParts)
		}
	}
}

// TestInspectContextCancelled: a cancelled context stops InspectContext
// with the context's error, and Inspect is the same call without one.
func TestInspectContextCancelled(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k3.InspectContext(ctx, dir, k3.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	a, err := k3.InspectContext(context.Background(), dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.FloorBytes != b.FloorBytes || a.Config != b.Config {
		t.Errorf("InspectContext floor %d, Inspect %d", a.FloorBytes, b.FloorBytes)
	}
}

// TestInspectWithMaxContext: an inspection re-planned for another context
// length gives what Inspect with that MaxContext gives (floor, full
// budget, the plan at a budget), and a negative length is refused.
func TestInspectWithMaxContext(t *testing.T) {
	dir := testmodel.Dir(t)
	base, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 100, 4096, 50000} {
		want, err := k3.Inspect(dir, k3.Options{MaxContext: n})
		if err != nil {
			t.Fatal(err)
		}
		got, err := base.WithMaxContext(n)
		if err != nil {
			t.Fatal(err)
		}
		if got.FloorBytes != want.FloorBytes || got.FullBytes != want.FullBytes {
			t.Errorf("MaxContext %d: floor %d, full %d; Inspect gives %d, %d", n, got.FloorBytes, got.FullBytes, want.FloorBytes, want.FullBytes)
		}
		budget := want.FloorBytes + 1<<20
		a, errA := got.PlanSessions(budget, 2, 0)
		b, errB := want.PlanSessions(budget, 2, 0)
		if (errA == nil) != (errB == nil) || (errA == nil && a.String() != b.String()) {
			t.Errorf("MaxContext %d: plan at %d bytes differs:\n%v %v\n%v %v", n, budget, a, errA, b, errB)
		}
	}
	if base.FloorBytes == 0 {
		t.Fatal("no floor")
	}
	if _, err := base.WithMaxContext(-1); !errors.Is(err, k3.ErrBadOptions) {
		t.Errorf("MaxContext -1: %v, want ErrBadOptions", err)
	}
}
