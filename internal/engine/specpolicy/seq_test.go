package specpolicy

import (
	"slices"
	"testing"

	"github.com/k3go/k3/internal/engine/draft"
)

// TestSeqJudgesDrafts feeds a sequence that repeats a block, token by
// token, and checks that the drafts are the block's continuation, that
// every draft is judged by the tokens that follow (verified or not), and
// that the survival of a long match rises with the record.
func TestSeqJudgesDrafts(t *testing.T) {
	block := []int{5, 9, 2, 7, 1, 8, 3, 6}
	var seq []int
	for range 6 {
		seq = append(seq, block...)
	}
	var q Seq
	var sh Shared
	var first, last []float64
	for n := 2; n <= len(seq); n++ {
		d, s := q.Propose(seq[:n], 4, nil, nil, &sh)
		if n > len(block) {
			want := seq[n:min(n+4, len(seq))]
			if len(want) > 0 && !slices.Equal(d[:len(want)], want) {
				t.Fatalf("at %d: draft %v, want %v", n, d, want)
			}
			if first == nil {
				first = slices.Clone(s)
			}
			last = slices.Clone(s)
		}
	}
	if q.Proposed == 0 || q.Right != q.Proposed {
		t.Fatalf("judged %d drafts, %d right; every draft of a repeated block is right", q.Proposed, q.Right)
	}
	if last[0] <= first[0] || last[3] <= first[3] {
		t.Fatalf("survival did not rise: first %v, last %v", first, last)
	}
	q.Flush(&sh)
	var c Counts
	sh.Snapshot(&c)
	if c.Total() == 0 {
		t.Fatal("nothing reached the server's record")
	}
	// A sequence that goes back drops its open drafts unjudged; a wrong
	// continuation is judged wrong.
	p := q.Proposed
	q.Propose(seq[:10], 4, nil, nil, &sh)
	q.Reset()
	alt := append(slices.Clone(seq[:20]), 99, 98, 97)
	q.Propose(seq[:20], 4, nil, nil, &sh)
	q.Propose(alt, 4, nil, nil, &sh)
	if q.Proposed != p+1 || q.Right != p {
		t.Fatalf("after a wrong continuation: %d judged, %d right (before %d)", q.Proposed, q.Right, p)
	}
	// An external drafter's drafts carry no match evidence.
	d, s := q.Propose(seq[:9], 3, nil, fixedDrafter{1, 2, 3, 4}, &sh)
	if !slices.Equal(d, []int{1, 2, 3}) || len(s) != 3 {
		t.Fatalf("external: %v %v", d, s)
	}
	if got := q.open[len(q.open)-1].ev; got != (draft.Evidence{Source: draft.External}) {
		t.Fatalf("external evidence %+v", got)
	}
}

type fixedDrafter []int

func (f fixedDrafter) Draft(seq []int, max int, dst []int) []int {
	return append(dst, f[:min(max, len(f))]...)
}

// TestSeqLongRun drafts along 3000 tokens of a repeated block, where some
// draft is always open (its tokens are compacted as they pile up), and
// checks that every draft is judged right.
func TestSeqLongRun(t *testing.T) {
	seq := make([]int, 3000)
	for i := range seq {
		seq[i] = (i * 7) % 13
	}
	var q Seq
	for n := 2; n <= len(seq); n++ {
		q.Propose(seq[:n], 8, nil, nil, nil)
	}
	if q.Proposed < 2900 || q.Right != q.Proposed {
		t.Fatalf("%d judged, %d right", q.Proposed, q.Right)
	}
	if cap(q.buf) > 256*MaxDraft {
		t.Fatalf("the open drafts' buffer grew to %d tokens", cap(q.buf))
	}
}

// BenchmarkPropose measures one decoding step's drafting: judging the open
// drafts, the longest match in a sequence of 32k tokens of text-like
// repetition and in a full shared index, the survivals (go test
// ./internal/engine/specpolicy -bench Propose).
func BenchmarkPropose(b *testing.B) {
	seq := make([]int, 0, 1<<15+b.N+16)
	for i := 0; len(seq) < 1<<15+b.N+1; i++ {
		// Lines of a few hundred distinct words, some repeated.
		for w := 0; w < 12; w++ {
			seq = append(seq, (i*7+w*w)%400+(i%5)*w)
		}
	}
	x := draft.NewIndex(1 << 20)
	for i := 0; i+64 <= 1<<15; i += 64 {
		x.Add(nil, seq[i:i+64])
	}
	var q Seq
	var sh Shared
	q.Propose(seq[:1<<15], 8, x, nil, &sh)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q.Propose(seq[:1<<15+i+1], 8, x, nil, &sh)
	}
}
