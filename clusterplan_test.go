package k3_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
)

// TestPlanCluster plans a header-only checkpoint of medium's widths (8
// layers, 128 experts) as clusters: one rank is the plan of one process;
// with two and three ranks each rank fits the budget, rank 0 holds the
// sessions (its KDA heads of their states, as a worker does), the
// slices' trunks and experts divide by the rank count, an expert's halves are what the caches hold, and a
// decoding pass takes the rounds the layers make (three per attention
// layer, two per dense FFN, four per MoE trunk and two for its experts,
// one for the head) and sends its inputs to every worker.
func TestPlanCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sparse")
	p := synth.Medium()
	p.SetLayers(8)
	p.Config.Experts = 128
	if _, err := synth.WriteSparse(dir, p, 0); err != nil {
		t.Fatal(err)
	}
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 4e9
	one, err := in.PlanCluster(budget, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	want, err := in.PlanSessions(budget, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one.Rank0, want) || one.Worker != nil || one.Rank0Experts.Units != in.Sizes.Experts ||
		one.Rank0Experts.ExpertBytes != in.Sizes.ExpertBytes || one.DecodePass(4, 30) != (k3.ClusterPass{}) {
		t.Fatalf("one rank: %+v, want the plan of one process %+v", one, want)
	}
	c := in.Config
	for _, ranks := range []int{2, 3} {
		cp, err := in.PlanCluster(budget, ranks, 4)
		if err != nil {
			t.Fatal(err)
		}
		r0, w := cp.Rank0, cp.Worker
		if r0.TotalBytes > budget || w.TotalBytes > budget || r0.Sessions != 4 || r0.StateBytes != workerHeads(c, ranks, 4, want.StateBytes, want.Sessions) || w.StateBytes != workerHeads(c, ranks, 4, want.StateBytes, want.Sessions) || w.StateBytes == 0 || w.KVBytes != 0 {
			t.Fatalf("%d ranks: rank 0 plans %d bytes for %d sessions (state %d), the worker %d (state %d, KV %d); budget %d",
				ranks, r0.TotalBytes, r0.Sessions, r0.StateBytes, w.TotalBytes, w.StateBytes, w.KVBytes, int64(budget))
		}
		for _, s := range []k3.ExpertShare{cp.Rank0Experts, cp.WorkerExperts} {
			if s.Units != 2*in.Sizes.Experts || s.ExpertBytes*int64(ranks) < in.Sizes.ExpertBytes*9/10 || s.ExpertBytes*int64(ranks) > in.Sizes.ExpertBytes*11/10 {
				t.Fatalf("%d ranks: a rank's share of the experts %+v; the whole: %d experts of %d bytes", ranks, s, in.Sizes.Experts, in.Sizes.ExpertBytes)
			}
		}
		// Everything resident: each rank's slice is about 1/ranks of the
		// trunk.
		full, err := in.PlanCluster(0, ranks, 1)
		if err != nil {
			t.Fatal(err)
		}
		whole := in.Sizes.TrunkBuffers / int64(ranks)
		if pb := full.Worker.PinnedBytes; pb < whole*9/10 || pb > whole*11/10 {
			t.Fatalf("%d ranks: the worker pins %d bytes of trunk, want about %d", ranks, pb, whole)
		}
		pass := cp.DecodePass(1, float64(c.TopK))
		moe := c.MoELayers
		// A KDA layer: its heads (every rank's, up to their gated
		// outputs), the output projection; an MLA layer three. A MoE
		// layer: router, latent down (with the shared experts' gate and
		// up), latent up; the experts' up (with the shared experts' down,
		// in a one-tile pass) and down.
		if g := 2*c.KDALayers + 3*c.MLALayers + 2*c.DenseLayers + 5*moe + 1; pass.Gathers != g {
			t.Fatalf("%d ranks: %d gathers for a token, want %d", ranks, pass.Gathers, g)
		}
		if perRound := int64(4 * c.Hidden * (ranks - 1)); pass.SentBytes < int64(pass.Gathers)*perRound/2 || pass.ReceivedBytes <= 0 {
			t.Fatalf("%d ranks: a token sends %d bytes and receives %d", ranks, pass.SentBytes, pass.ReceivedBytes)
		}
	}
	// Speculation: every rank keeps the copy and record of its own heads,
	// a worker for every session, rank 0 in its rollback buffers; both
	// about 1/ranks of one process's buffer.
	spec, err := k3.Inspect(dir, k3.Options{MaxContext: 4096, Speculate: 4})
	if err != nil {
		t.Fatal(err)
	}
	solo, err := spec.PlanCluster(0, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	perSlot := solo.Rank0.SpecBytes / int64(solo.Rank0.SpecSlots)
	for _, ranks := range []int{2, 3} {
		cp, err := spec.PlanCluster(0, ranks, 4)
		if err != nil {
			t.Fatal(err)
		}
		share := workerHeads(c, ranks, 1, perSlot, 1) // the first rank's heads of one buffer
		r0, w := cp.Rank0, cp.Worker
		if w.SpecSlots != 4 || w.SpecRows != 5 || r0.SpecSlots != solo.Rank0.SpecSlots ||
			w.SpecBytes < 4*share*9/10 || w.SpecBytes > 4*share*11/10 || r0.SpecBytes < int64(r0.SpecSlots)*share*9/10 || r0.SpecBytes > int64(r0.SpecSlots)*share*11/10 {
			t.Fatalf("%d ranks: speculation plans %d bytes in %d slots of %d rows on rank 0, %d in %d slots of %d rows on a worker; one process %d bytes a slot",
				ranks, r0.SpecBytes, r0.SpecSlots, r0.SpecRows, w.SpecBytes, w.SpecSlots, w.SpecRows, perSlot)
		}
	}
	if _, err := in.PlanCluster(budget, 0, 1); !errors.Is(err, k3.ErrBadOptions) {
		t.Fatalf("a cluster of 0 ranks: %v", err)
	}
	if _, err := in.PlanCluster(1e8, 2, 1); !errors.Is(err, k3.ErrBudget) {
		t.Fatalf("a budget below a rank's floor: %v", err)
	}
}

// workerHeads is what a worker of ranks keeps of sessions sequences' KDA
// state: its heads (the first rank's share, the most) of each, a head
// being an equal share of rank 0's whole state (r0State for r0Sessions).
func workerHeads(c k3.Config, ranks, sessions int, r0State int64, r0Sessions int) int64 {
	perHead := r0State / int64(r0Sessions*c.KDAHeads)
	return int64(sessions*((c.KDAHeads+ranks-1)/ranks)) * perHead
}
