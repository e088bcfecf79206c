package k3_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
)

// TestFullShapeSparse writes the released Kimi K3's layout as sparse files
// (headers and holes: a few seconds, about 130 MB of disk), opens it and
// plans it at 8, 32 and 128 GB: the index of 497,220 tensors (the vision
// tower's 168 among them, ignored), the trunk's
// 108.81 GB, 82,432 experts of 17,547,264 bytes, a floor under 8 GB, more
// of the trunk pinned as the budget grows.
func TestFullShapeSparse(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 130 MB of shard headers")
	}
	dir := filepath.Join(t.TempDir(), "full")
	start := time.Now()
	L, err := synth.WriteSparse(dir, synth.Full(), 0)
	if err != nil {
		t.Fatal(err)
	}
	written := time.Since(start)
	if len(L.Shards) != 96 || L.Tensors != 497220 {
		t.Fatalf("%d shards, %d tensors; want the release's 96 shards and 497,220 tensors", len(L.Shards), L.Tensors)
	}
	// The release's shards are 1,560,936,091,448 bytes; the language
	// model's tensors are exact, the vision tower's shapes are read off
	// its config (12,288 bytes short of the release's).
	var shards int64
	for _, sh := range L.Shards {
		shards += sh.Size
	}
	if d := math.Abs(float64(shards)/1560936091448 - 1); d > 1e-6 {
		t.Fatalf("%d bytes in the shards, %.5f%% off the release's size", shards, 100*d)
	}
	start = time.Now()
	in, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("written in %v; opened and planned in %v; floor %.2f GB", written, time.Since(start), float64(in.FloorBytes)/1e9)
	sz := in.Sizes
	// The trunk's 93 per-layer runs are 108,811,694,848 bytes in the
	// release; the buffers hold them with alignment, the payload counts
	// the matrices alone.
	const trunk = 108811694848
	if in.Tensors != 497220 || sz.Experts != 82432 || sz.ExpertBytes != 17547264 || sz.ExpertsPerTok != 1472 ||
		sz.TrunkBuffers < trunk || sz.TrunkBuffers > trunk+trunk/100 || sz.TrunkPayload > trunk || sz.TrunkPayload < trunk-trunk/100 {
		t.Fatalf("tensors %d, experts %d of %d bytes (%d per token), trunk buffers %d, matrices %d bytes",
			in.Tensors, sz.Experts, sz.ExpertBytes, sz.ExpertsPerTok, sz.TrunkBuffers, sz.TrunkPayload)
	}
	// The floor: lm_head 2.35 GB, the largest part (layer 0's dense FFN,
	// 1.45 GB) as one ring slot, 17 expert slots, 0.46 GB of KDA state,
	// the index, the process.
	if in.FloorBytes < 4.5e9 || in.FloorBytes > 8e9 {
		t.Fatalf("floor %d bytes, want between 4.5 and 8 GB", in.FloorBytes)
	}
	if _, err := in.Plan(in.FloorBytes - 1); err == nil {
		t.Fatal("a budget under the floor was planned")
	}
	var lastPinned int64 = -1
	for _, budget := range []int64{8e9, 32e9, 128e9} {
		mp, err := in.Plan(budget)
		if err != nil {
			t.Fatalf("%d GB: %v", budget/1e9, err)
		}
		if mp.TotalBytes > budget || mp.HeapLimitBytes < mp.HeapBytes {
			t.Fatalf("%d GB: planned %d, heap %d, Go memory limit %d", budget/1e9, mp.TotalBytes, mp.HeapBytes, mp.HeapLimitBytes)
		}
		if mp.PinnedBytes <= lastPinned {
			t.Fatalf("%d GB pins %d bytes of trunk, not more than the smaller budget's %d", budget/1e9, mp.PinnedBytes, lastPinned)
		}
		lastPinned = mp.PinnedBytes
		t.Logf("%d GB: %s", budget/1e9, mp)
	}
}

// TestSparseZeroWeights runs a checkpoint whose weights are all zeros (the
// holes of a sparse file): every router score ties, so top-k must pick the
// lowest indices, and nothing may turn into NaN. Two runs give the same
// tokens; the logits are finite.
func TestSparseZeroWeights(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "zeros")
	if _, err := synth.WriteSparse(dir, synth.Tiny(), 0); err != nil {
		t.Fatal(err)
	}
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	var first []int
	for _, budget := range []int64{in.FloorBytes, 0} {
		m, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: 64})
		if err != nil {
			t.Fatal(err)
		}
		s := m.NewSession()
		logits, err := s.Logits(context.Background(), []int{1, 2, 3})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("logit %d = %v", i, v)
			}
		}
		s.Close()
		var got []int
		for tok, err := range m.Generate(context.Background(), []int{1, 2, 3}, k3.GenerateOptions{MaxTokens: 4}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, tok.ID)
		}
		m.Close()
		if first == nil {
			first = got
			continue
		}
		if len(got) != len(first) {
			t.Fatalf("budget %d: %v, then %v", budget, got, first)
		}
		for i := range got {
			if got[i] != first[i] {
				t.Fatalf("budget %d: %v, then %v", budget, got, first)
			}
		}
	}
	if len(first) != 4 {
		t.Fatalf("generated %v", first)
	}
}
