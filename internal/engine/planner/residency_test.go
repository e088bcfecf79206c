package planner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// sparseWeights summarises a synthetic checkpoint of profile p written as
// headers only (the real widths of medium in a few MB of disk).
func sparseWeights(t *testing.T, p synth.Profile) *Weights {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if _, err := synth.WriteSparse(dir, p, 0); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	pl, err := model.NewPlan(cfg, ck)
	if err != nil {
		t.Fatal(err)
	}
	w := &Weights{Cfg: cfg, Sizes: pl.Sizes()}
	for _, pt := range pl.Parts() {
		w.Parts = append(w.Parts, Part{Room: pt.Bytes, Read: pt.Payload, Payload: pt.Payload})
	}
	return w
}

// TestDecodeKeepsTheTrunk is issue 31's regression test: at every budget
// from the floor to everything resident, while no prompt waits, the plan
// the engine decodes in pins at least the trunk a plan of 64-row passes
// pins (--prefill-chunk 64, which holds no room for wide passes) and
// streams no more of it per pass; memory for wide passes is taken only
// while prompts wait.
func TestDecodeKeepsTheTrunk(t *testing.T) {
	w := sparseWeights(t, synth.Medium())
	req := Request{MaxContext: 4096, Threads: 2, Executable: 12 << 20}
	floor := Floor(w, req)
	full := Full(w, req)
	steps := 0
	for budget := floor; budget <= full+full/8; budget += (full - floor) / 40 {
		r := req
		r.Budget = budget
		res, err := NewResidency(w, r)
		if err != nil {
			t.Fatalf("budget %s: %v", Human(budget), err)
		}
		c64 := r
		c64.Chunk = 64
		narrow, err := Plan(w, c64)
		if err != nil {
			t.Fatalf("budget %s, chunk 64: %v", Human(budget), err)
		}
		for _, decoding := range []int{0, 1, 8} {
			i := res.Choose(0, Work{DecodeRows: decoding})
			mp := res.Plans[i]
			if i != 0 || mp.PinnedBytes < narrow.PinnedBytes || mp.TrunkBytesPerPass > narrow.TrunkBytesPerPass {
				t.Fatalf("budget %s, %d decoding, no prompt: plan %d pins %s and streams %s per pass; with 64-row passes %s and %s",
					Human(budget), decoding, i, Human(mp.PinnedBytes), Human(mp.TrunkBytesPerPass), Human(narrow.PinnedBytes), Human(narrow.TrunkBytesPerPass))
			}
		}
		// The engine in a wide plan goes back to rest once no prompt waits.
		if n := len(res.Plans); n > 1 && res.Choose(n-1, Work{DecodeRows: 1}) != 0 {
			t.Fatalf("budget %s: decoding stays in the wide plan", Human(budget))
		}
		steps++
	}
	if steps < 20 {
		t.Fatalf("only %d budgets checked", steps)
	}
}

// TestChooseWidensForPrompts checks what the choice buys: at the floor a
// 512-token prompt is prefilled in passes of at least MinAutoRows, reading
// at most 0.3 of what 64-row passes read; a prompt that fits one resting
// pass moves nothing; a long prompt at a larger budget takes a wider pass
// than the floor's; the choice never prices above staying put; and every
// plan of a residency shares the Go heap and the prefix-cache tier.
func TestChooseWidensForPrompts(t *testing.T) {
	w := sparseWeights(t, synth.Medium())
	req := Request{MaxContext: 4096, Threads: 2, PrefixRAMAuto: true}
	floor := Floor(w, req)
	for _, budget := range []int64{floor, floor + floor/2, 3 * floor, 8e9} {
		r := req
		r.Budget = budget
		res, err := NewResidency(w, r)
		if err != nil {
			t.Fatal(err)
		}
		rest := res.Plans[0]
		for i, mp := range res.Plans {
			if mp.Heap() != rest.Heap() || mp.PrefixRAM != rest.PrefixRAM || mp.Total() > budget || mp.EmbedResident != rest.EmbedResident {
				t.Fatalf("budget %s, plan %d: heap %d, prefix %d, total %d, embed %v; resting plan %d, %d, %d, %v",
					Human(budget), i, mp.Heap(), mp.PrefixRAM, mp.Total(), mp.EmbedResident, rest.Heap(), rest.PrefixRAM, rest.Total(), rest.EmbedResident)
			}
		}
		if i := res.Choose(0, Work{PromptRows: 16}); i != 0 {
			t.Errorf("budget %s: a 16-token prompt moves to plan %d (%d rows)", Human(budget), i, res.Plans[i].Rows)
		}
		for _, prompt := range []int{300, 512, 4000} {
			work := Work{DecodeRows: 1, PromptRows: prompt}
			for cur := range res.Plans {
				i := res.Choose(cur, work)
				if res.Cost(cur, i, work) > res.Cost(cur, cur, work) {
					t.Fatalf("budget %s, prompt %d: from plan %d the choice %d costs more than staying", Human(budget), prompt, cur, i)
				}
			}
		}
		i := res.Choose(0, Work{PromptRows: 512})
		if res.Plans[i].Rows < MinAutoRows {
			t.Errorf("budget %s: a 512-token prompt in passes of %d rows", Human(budget), res.Plans[i].Rows)
		}
		if budget == floor {
			narrow := res.Cost(0, 0, Work{PromptRows: 512})
			if got := res.Cost(0, i, Work{PromptRows: 512}); got > 0.3*narrow {
				t.Errorf("at the floor a 512-token prompt reads %s, %.2f of 64-row passes' %s", Human(int64(got)), got/narrow, Human(int64(narrow)))
			}
		}
		if budget == 8e9 {
			if i := res.Choose(0, Work{PromptRows: 4000}); res.Plans[i].Rows <= 2*MinAutoRows {
				t.Errorf("at 8 GB a 4000-token prompt takes passes of %d rows", res.Plans[i].Rows)
			}
		}
	}
}

// TestClusterPlansShareTheHeap is the cluster's half of issue 31: on rank
// 0 of a cluster every plan of a residency counts the cluster buffers of
// its widest pass (the workers' replies, the expert chunk), which the Go
// heap keeps once a prefill has grown them, so that decoding after a wide
// prefill stays within the budget; each plan still fits it.
func TestClusterPlansShareTheHeap(t *testing.T) {
	w := sparseWeights(t, synth.Medium())
	req := Request{MaxContext: 4096, Threads: 1, Ranks: 2, PrefixRAMAuto: true}
	floor := Floor(w, req)
	wide := 0
	for _, budget := range []int64{floor, floor + floor/4, floor + floor/2, 2 * floor, 3 * floor} {
		r := req
		r.Budget = budget
		res, err := NewResidency(w, r)
		if err != nil {
			t.Fatalf("budget %s: %v", Human(budget), err)
		}
		rest, widest := res.Plans[0], res.Plans[len(res.Plans)-1]
		buffers := model.ClusterScratchBytes(w.Cfg, widest.Rows, widest.Tile)
		for i, mp := range res.Plans {
			if mp.Heap() != rest.Heap() || mp.Scratch < buffers || mp.Total() > budget {
				t.Fatalf("budget %s, plan %d of %d (%d rows): heap %s, scratch %s, total %s; resting plan's heap %s; the widest pass's cluster buffers %s",
					Human(budget), i, len(res.Plans), mp.Rows, Human(mp.Heap()), Human(mp.Scratch), Human(mp.Total()), Human(rest.Heap()), Human(buffers))
			}
		}
		if len(res.Plans) > 1 {
			wide++
		}
	}
	if wide == 0 {
		t.Fatal("no budget had a plan of wider passes")
	}
}
