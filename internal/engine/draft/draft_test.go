package draft

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// longest is the reference: the longest earlier match of seq's suffix
// (capped at MaxCompare), the most recent of the longest.
func longest(seq []int) Match {
	n := len(seq)
	best := Match{}
	for c := n - 2; c >= 0; c-- {
		l := 0
		for l < MaxCompare && c-l >= 0 && seq[c-l] == seq[n-1-l] {
			l++
		}
		if l > best.Len {
			best = Match{Pos: c + 1, Len: l}
		}
	}
	return best
}

// TestMatcherFindsLongest compares Find with the brute-force reference on
// random sequences over small alphabets (many repeats), token by token.
func TestMatcherFindsLongest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		alpha := 5 + rng.IntN(10)
		n := 1 + rng.IntN(300)
		seq := make([]int, 0, n)
		var m Matcher
		for i := 0; i < n; i++ {
			if i > 10 && rng.IntN(4) == 0 {
				// Copy a stretch from earlier: long matches.
				from := rng.IntN(i - 5)
				for k := 0; k < 1+rng.IntN(20) && len(seq) < n; k++ {
					seq = append(seq, seq[from+k])
				}
				i = len(seq) - 1
			} else {
				seq = append(seq, rng.IntN(alpha)*1000003)
			}
			m.Sync(seq)
			if m.Len() != len(seq) {
				t.Fatalf("indexed %d of %d tokens", m.Len(), len(seq))
			}
			got, want := m.Find(), longest(seq)
			if got != want {
				t.Fatalf("trial %d, %d tokens: Find %+v, reference %+v", trial, len(seq), got, want)
			}
			if want.Len > 0 {
				c := m.Continuation(got, 5, nil)
				if !slices.Equal(c, seq[want.Pos:min(want.Pos+5, len(seq))]) {
					t.Fatalf("continuation %v, want %v", c, seq[want.Pos:min(want.Pos+5, len(seq))])
				}
			}
		}
	}
}

// TestMatcherSyncRestarts checks that a sequence which is not the
// continuation of what was indexed is indexed afresh, and that Reset
// forgets.
func TestMatcherSyncRestarts(t *testing.T) {
	var m Matcher
	a := []int{1, 2, 3, 4, 1, 2, 3}
	m.Sync(a)
	if got := m.Find(); got != (Match{Pos: 3, Len: 3}) {
		t.Fatalf("Find %+v", got)
	}
	b := []int{9, 8, 9}
	m.Sync(b)
	if m.Len() != 3 || m.Find() != (Match{Pos: 1, Len: 1}) {
		t.Fatalf("after a different sequence: len %d, Find %+v", m.Len(), m.Find())
	}
	m.Reset()
	if m.Len() != 0 || m.Find() != (Match{}) {
		t.Fatal("Reset kept tokens")
	}
	// Growth past the first table rebuilds the chains.
	long := make([]int, 5000)
	for i := range long {
		long[i] = i % 777
	}
	m.Sync(long)
	if got := m.Find(); got.Len != MaxCompare || got.Pos != 5000-777 {
		t.Fatalf("Find on a periodic sequence: %+v", got)
	}
}

// TestIndexDraft checks matches across documents, that none crosses a
// separator, that the ring forgets the oldest tokens, and that a
// sequence's own longer match wins in Propose.
func TestIndexDraft(t *testing.T) {
	x := NewIndex(1024)
	x.Add([]int{7}, []int{1, 2, 3, 4, 5})
	x.Add(nil, []int{2, 3, 9, 9})
	seq := []int{100, 1, 2, 3}
	got, mt := x.Draft(seq, 0, 4, nil)
	if mt.Len != 3 || !slices.Equal(got, []int{4, 5}) {
		t.Fatalf("draft %v match %+v; want [4 5] after a 3-token match (not across the separator)", got, mt)
	}
	// The lead matches too.
	got, mt = x.Draft([]int{7, 1}, 0, 2, nil)
	if mt.Len != 2 || !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("draft %v match %+v", got, mt)
	}
	// Not longer than beat: nothing.
	if got, _ := x.Draft(seq, 3, 4, nil); len(got) != 0 {
		t.Fatalf("a match no longer than beat gave %v", got)
	}
	// Fill the ring: the first documents are gone.
	for i := 0; i < 600; i++ {
		x.Add(nil, []int{1000 + i})
	}
	if got, mt := x.Draft(seq, 0, 4, nil); len(got) != 0 {
		t.Fatalf("an overwritten document still matched: %v %+v", got, mt)
	}

	// Propose: the sequence's own match, unless the index's is longer.
	y := NewIndex(1024)
	y.Add(nil, []int{5, 6, 7, 8, 40, 41})
	var m Matcher
	own := []int{7, 8, 30, 31, 6, 7, 8}
	m.Sync(own)
	d, ev := Propose(&m, y, own, 3, nil)
	if ev != (Evidence{Source: Shared, Match: 3}) || !slices.Equal(d, []int{40, 41}) {
		t.Fatalf("Propose %v %+v; want the index's 3-token match", d, ev)
	}
	d, ev = Propose(&m, nil, own, 3, nil)
	if ev != (Evidence{Source: Own, Match: 2}) || !slices.Equal(d, []int{30, 31, 6}) {
		t.Fatalf("Propose without an index %v %+v", d, ev)
	}
	m.Sync([]int{1, 2, 3})
	if d, ev := Propose(&m, y, []int{1, 2, 3}, 3, nil); len(d) != 0 || ev.Source != None {
		t.Fatalf("nothing matches, yet %v %+v", d, ev)
	}
}

// TestIndexMatchesReference fills an index with random documents over a
// small alphabet and compares its matches with a brute-force search over
// the documents kept.
func TestIndexMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := NewIndex(1024)
	var ring []int // the reference: documents with -1 between
	for d := 0; d < 300; d++ {
		doc := make([]int, 1+rng.IntN(12))
		for i := range doc {
			doc[i] = rng.IntN(6)
		}
		x.Add(nil, doc)
		ring = append(append(ring, -1), doc...)
		if len(ring) > x.Cap() {
			ring = ring[len(ring)-x.Cap():]
		}
		seq := make([]int, 2+rng.IntN(6))
		for i := range seq {
			seq[i] = rng.IntN(6)
		}
		got, mt := x.Draft(seq, 0, 3, nil)
		// Reference: the longest match ending at some ring position c
		// (most recent on ties) with a token after it.
		best, bestC := 0, -1
		for c := len(ring) - 2; c >= 0; c-- {
			l := 0
			for l < len(seq) && c-l >= 0 && ring[c-l] == seq[len(seq)-1-l] {
				l++
			}
			if l >= 2 && l > best && ring[c+1] != -1 {
				best, bestC = l, c
			}
		}
		if mt.Len != best {
			t.Fatalf("doc %d: match %d, reference %d", d, mt.Len, best)
		}
		if best > 0 {
			var want []int
			for p := bestC + 1; p < len(ring) && len(want) < 3 && ring[p] != -1; p++ {
				want = append(want, ring[p])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("doc %d: draft %v, reference %v", d, got, want)
			}
		}
	}
}

// TestMatcherAllocatesNothingOnceGrown checks the per-token path.
func TestMatcherAllocatesNothingOnceGrown(t *testing.T) {
	seq := make([]int, 0, 4096)
	for i := 0; i < 4096; i++ {
		seq = append(seq, (i*7)%97)
	}
	var m Matcher
	m.Sync(seq[:4096])
	m.Reset()
	dst := make([]int, 0, 16)
	n := 1
	allocs := testing.AllocsPerRun(100, func() {
		m.Sync(seq[:n])
		mt := m.Find()
		dst = m.Continuation(mt, 8, dst[:0])
		n++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per token", allocs)
	}
}
