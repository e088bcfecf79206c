package k3_test

import (
	"context"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestWithProgress: a prompt fed in passes of MaxBatch rows reports each
// pass, cumulative, to its own context's function and not to another
// session's; decoding reports one token per step; a panicking function
// leaves the step's result alone; the logits are those of a step without
// progress.
func TestWithProgress(t *testing.T) {
	m, err := k3.Open(testmodel.Dir(t), k3.Options{MaxBatch: 4, MaxContext: 64, Sessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompt := []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	var mu sync.Mutex
	var got []k3.Progress
	ctx := k3.WithProgress(context.Background(), func(p k3.Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	with, err := m.NewSession().Logits(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	without, err := m.NewSession().Logits(context.Background(), prompt)
	if err != nil {
		t.Fatal(err)
	}
	if i := firstBitDiff(with, without); i >= 0 {
		t.Fatalf("logit %d differs with a progress function", i)
	}
	want := []int{0, 4, 8, 10}
	if len(got) != len(want) || got[0] != (k3.Progress{Total: 10}) {
		t.Fatalf("progress %+v, want Done %v of 10", got, want)
	}
	prev := 0
	for i, p := range got[1:] {
		i++
		if p.Done != want[i] || p.Total != 10 || p.PassRows < p.Done-prev || p.PassTime <= 0 {
			t.Fatalf("report %d: %+v, want Done %d of 10, the pass's rows and time", i, p, want[i])
		}
		prev = p.Done
	}
	got = nil
	n := 0
	for _, err := range m.Generate(ctx, []int{1, 2}, k3.GenerateOptions{MaxTokens: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	// The prompt (2 tokens, one pass), then one step per token after the
	// first: a report as each step starts and one after its pass.
	if n != 3 || len(got) != 6 || got[0] != (k3.Progress{Total: 2}) || got[1] != (k3.Progress{Done: 2, Total: 2, PassRows: got[1].PassRows, PassTime: got[1].PassTime}) ||
		got[2] != (k3.Progress{Total: 1}) || got[3].Done != 1 || got[5].Total != 1 {
		t.Fatalf("%d tokens, progress %+v", n, got)
	}
	boom := k3.WithProgress(context.Background(), func(k3.Progress) { panic("boom") })
	again, err := m.NewSession().Logits(boom, prompt)
	if err != nil {
		t.Fatalf("a panicking progress function failed the step: %v", err)
	}
	if i := firstBitDiff(again, without); i >= 0 {
		t.Fatalf("logit %d differs after a panicking progress function", i)
	}
}
