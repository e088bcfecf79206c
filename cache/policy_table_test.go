package cache_test

import (
	"flag"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3/cache"
	"github.com/k3go/k3/cache/internal/study"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

var fullStudy = flag.Bool("study", false, "replay every study policy on the synthetic traces too (slow)")

// tableCaps are the capacities (in experts) of the policy study.
var tableCaps = []int{64, 256, 1024, 1344, 2048, 4096}

type namedPolicy struct {
	name string
	new  func() cache.Policy
}

var studyPolicies = []namedPolicy{
	{"LRU", func() cache.Policy { return cache.NewLRU() }},
	{"ARC", func() cache.Policy { return study.NewARC() }},
	{"per-layer LFU", func() cache.Policy { return study.NewLayerLFU() }},
	{"window 0 (no adaptation)", func() cache.Policy {
		return cache.NewAdaptive(cache.AdaptiveOptions{Windows: []float64{0}})
	}},
	{"Adaptive (shipped)", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{}) }},
}

// policyTable replays trace through the study policies and Belady at every
// capacity, in parallel, and returns hit rates in percent: rows[policy][cap],
// with Belady last. Unless all is set only LRU and the shipped policy run
// (the other rows are NaN).
func policyTable(trace []cache.Key, caps []int, all bool) [][]float64 {
	rows := make([][]float64, len(studyPolicies)+1)
	for i := range rows {
		rows[i] = make([]float64, len(caps))
	}
	var wg sync.WaitGroup
	for j, c := range caps {
		for i, p := range studyPolicies {
			if !all && i != 0 && i != len(studyPolicies)-1 {
				rows[i][j] = math.NaN()
				continue
			}
			wg.Go(func() { rows[i][j] = 100 * cache.Replay(trace, c, p.new()).HitRate() })
		}
		wg.Go(func() {
			rows[len(studyPolicies)][j] = 100 * float64(study.Belady(trace, c)) / float64(len(trace))
		})
	}
	wg.Wait()
	return rows
}

func formatTable(caps []int, rows [][]float64) string {
	var b strings.Builder
	b.WriteString("| policy |")
	for _, c := range caps {
		fmt.Fprintf(&b, " %d |", c)
	}
	b.WriteString("\n|---|")
	for range caps {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for i, r := range rows {
		name := "Belady (offline optimum)"
		if i < len(studyPolicies) {
			name = studyPolicies[i].name
		}
		if math.IsNaN(r[0]) {
			continue
		}
		fmt.Fprintf(&b, "| %s |", name)
		for _, v := range r {
			fmt.Fprintf(&b, " %.2f%% |", v)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func loadTrace(t *testing.T) []cache.Key {
	t.Helper()
	tr, err := study.ReadTrace(fixtures.Path(t, "expert_trace.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 100096 {
		t.Fatalf("expert_trace.bin has %d requests, want 100096", len(tr))
	}
	return tr
}

// TestPolicyTable replays the reference engine's full-recompute expert trace
// and prints the study's table (go test ./cache -run TestPolicyTable -v). It
// checks the LRU and Belady replays against the published numbers and holds
// the shipped policy to the target: never below LRU, and at 1,024, 2,048 and
// 4,096 experts at least half way from LRU to Belady.
func TestPolicyTable(t *testing.T) {
	if raceEnabled {
		t.Skip("replays are single-threaded and slow under -race")
	}
	tr := loadTrace(t)
	rows := policyTable(tr, tableCaps, true)
	t.Logf("full-recompute trace, %d requests, hit rate = hits / requests:\n%s", len(tr), formatTable(tableCaps, rows))

	lru, shipped, belady := rows[0], rows[len(studyPolicies)-1], rows[len(studyPolicies)]
	col := func(c int) int {
		for j, x := range tableCaps {
			if x == c {
				return j
			}
		}
		panic(c)
	}
	// Published: LRU holds 36.24% from 256 slots up (only repeats within a
	// step); Belady 43.4%, 50.6%, 64.9% at 1,024, 2,048, 4,096. At 64 slots a
	// few within-step repeats no longer fit, and LRU holds 35.60% (derived
	// here; the "36.2% at every capacity" rounds this case away).
	want := []struct {
		row  []float64
		name string
		cap  int
		pct  float64
	}{
		{lru, "LRU", 64, 35.60}, {lru, "LRU", 256, 36.24}, {lru, "LRU", 1024, 36.24},
		{lru, "LRU", 1344, 36.24}, {lru, "LRU", 2048, 36.24}, {lru, "LRU", 4096, 36.24},
		{belady, "Belady", 1024, 43.4}, {belady, "Belady", 2048, 50.6}, {belady, "Belady", 4096, 64.9},
	}
	for _, w := range want {
		if got := w.row[col(w.cap)]; math.Abs(got-w.pct) > 0.1 {
			t.Errorf("%s at %d slots: %.2f%%, published %.2f%%", w.name, w.cap, got, w.pct)
		}
	}
	for j, c := range tableCaps {
		if shipped[j] < lru[j] {
			t.Errorf("shipped policy at %d slots: %.2f%% < LRU %.2f%%", c, shipped[j], lru[j])
		}
	}
	for _, c := range []int{1024, 2048, 4096} {
		j := col(c)
		if goal := (lru[j] + belady[j]) / 2; shipped[j] < goal {
			t.Errorf("shipped policy at %d slots: %.2f%%, below half way from LRU (%.2f%%) to Belady (%.2f%%): %.2f%%",
				c, shipped[j], lru[j], belady[j], goal)
		}
	}
}

// TestPublishedCapacities checks the replays against the reference
// engine's own table (reference-engine.md §3.5), at its slot counts.
func TestPublishedCapacities(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("slow: Belady at 7,294 slots")
	}
	tr := loadTrace(t)
	for _, w := range []struct {
		slots       int
		lru, belady float64
	}{
		{455, 36.24, 39.42}, {911, 36.24, 42.61}, {1823, 36.24, 48.99},
		{3647, 36.24, 61.74}, {7294, 49.19, 84.59},
	} {
		lru := 100 * cache.Replay(tr, w.slots, cache.NewLRU()).HitRate()
		bel := 100 * float64(study.Belady(tr, w.slots)) / float64(len(tr))
		if math.Abs(lru-w.lru) > 0.1 || math.Abs(bel-w.belady) > 0.1 {
			t.Errorf("%d slots: LRU %.2f%% Belady %.2f%%, published %.2f%% %.2f%%", w.slots, lru, bel, w.lru, w.belady)
		}
	}
}

// TestDecodeTable prints the same study on the trace rebuilt as
// incremental decoding (prefill of the first pass, then one new position per
// step), the mode that matters in steady state. It is informational: the
// trace has only 7 decode steps.
func TestDecodeTable(t *testing.T) {
	if raceEnabled {
		t.Skip("replays are single-threaded and slow under -race")
	}
	tr := study.Incremental(loadTrace(t), 16)
	if len(tr) != 7360+7*1472 {
		t.Fatalf("incremental trace has %d requests, want %d", len(tr), 7360+7*1472)
	}
	rows := policyTable(tr, tableCaps, true)
	t.Logf("incremental-decode rebuild, %d requests:\n%s", len(tr), formatTable(tableCaps, rows))
}

// syntheticCases are decode-like traces with per-layer Zipf popularity and
// temporal correlation. The first three were used to choose the adaptation's
// constants (margin, epoch, confirmation); the rest were added afterwards,
// unseen, as a check against tuning to the test set.
var syntheticCases = []study.Synthetic{
	{Layers: 92, Experts: 896, TopK: 16, Prefill: 5, Tokens: 120, Zipf: 1.0, Carry: 0.3, Seed: 1},
	{Layers: 92, Experts: 896, TopK: 16, Prefill: 5, Tokens: 120, Zipf: 0.6, Carry: 0.6, Seed: 2},
	{Layers: 92, Experts: 896, TopK: 16, Prefill: 5, Tokens: 120, Zipf: 1.3, Carry: 0.0, Seed: 3},
	// held out
	{Layers: 92, Experts: 896, TopK: 16, Prefill: 8, Tokens: 100, Zipf: 0.8, Carry: 0.45, Seed: 11},
	{Layers: 92, Experts: 896, TopK: 16, Prefill: 3, Tokens: 100, Zipf: 1.1, Carry: 0.15, Seed: 12},
	{Layers: 48, Experts: 256, TopK: 8, Prefill: 12, Tokens: 300, Zipf: 0.9, Carry: 0.3, Seed: 13},
	{Layers: 60, Experts: 384, TopK: 6, Prefill: 0, Tokens: 400, Zipf: 1.2, Carry: 0.5, Seed: 14},
	{Layers: 92, Experts: 896, TopK: 16, Prefill: 20, Tokens: 60, Zipf: 0.7, Carry: 0.2, Seed: 15},
}

// TestSyntheticNotWorseThanLRU guards against a policy tuned to the one
// recorded trace: on synthetic traces the shipped policy must not fall below
// LRU at any capacity either. With -study it prints every policy.
func TestSyntheticNotWorseThanLRU(t *testing.T) {
	if raceEnabled {
		t.Skip("replays are single-threaded and slow under -race")
	}
	cases := syntheticCases
	if testing.Short() {
		cases = cases[:1]
	}
	for _, sc := range cases {
		name := fmt.Sprintf("L%d_E%d_K%d_zipf%.1f_carry%.2f_seed%d", sc.Layers, sc.Experts, sc.TopK, sc.Zipf, sc.Carry, sc.Seed)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr := sc.Trace()
			rows := policyTable(tr, tableCaps, *fullStudy)
			t.Logf("synthetic %+v, %d requests:\n%s", sc, len(tr), formatTable(tableCaps, rows))
			lru, shipped := rows[0], rows[len(studyPolicies)-1]
			for j, c := range tableCaps {
				if shipped[j] < lru[j] {
					t.Errorf("%d slots: shipped %.2f%% < LRU %.2f%%", c, shipped[j], lru[j])
				}
			}
		})
	}
}
