package sched

import (
	"math/rand/v2"
	"testing"
)

func check(t *testing.T, q []Request, maxRows, chunk int, got []Take) {
	t.Helper()
	rows, seen := 0, map[int]bool{}
	decode := 0
	for _, r := range q {
		if r.Left == 1 {
			decode++
		}
	}
	prefill := len(q) - decode
	gotDecode := 0
	for _, tk := range got {
		if seen[tk.Index] {
			t.Fatalf("request %d taken twice: %v", tk.Index, got)
		}
		seen[tk.Index] = true
		if tk.Rows < 1 || tk.Rows > q[tk.Index].Left {
			t.Fatalf("take %+v of request with %d left", tk, q[tk.Index].Left)
		}
		if q[tk.Index].Left > 1 && tk.Rows > chunk {
			t.Fatalf("prefill take %+v exceeds chunk %d", tk, chunk)
		}
		if q[tk.Index].Left == 1 {
			gotDecode++
		}
		rows += tk.Rows
	}
	if rows > maxRows {
		t.Fatalf("%d rows > max %d: %v", rows, maxRows, got)
	}
	if len(q) > 0 && len(got) == 0 {
		t.Fatalf("empty pass for %v", q)
	}
	wantDecode := min(decode, maxRows)
	if prefill > 0 && maxRows > 1 {
		wantDecode = min(decode, maxRows-1)
	}
	if gotDecode != wantDecode {
		t.Fatalf("%d decoding rows taken of %d (max %d): %v", gotDecode, decode, maxRows, got)
	}
	// Rows left unused only when nothing more could be taken.
	if rows < maxRows {
		for i, r := range q {
			cap := min(r.Left, chunk)
			if r.Left == 1 {
				cap = 1
				if prefill > 0 && gotDecode == maxRows-1 {
					cap = 0 // the row kept for prompts
				}
			}
			taken := 0
			for _, tk := range got {
				if tk.Index == i {
					taken = tk.Rows
				}
			}
			if taken < cap {
				t.Fatalf("rows %d < max %d but request %d (%d left) got only %d: %v", rows, maxRows, i, r.Left, taken, got)
			}
		}
	}
}

func TestNextExamples(t *testing.T) {
	q := []Request{{Left: 500}, {Left: 1}, {Left: 1}, {Left: 3}}
	got := Next(nil, q, 16, 64, 0)
	check(t, q, 16, 64, got)
	want := map[int]int{1: 1, 2: 1, 3: 3, 0: 11}
	for _, tk := range got {
		if want[tk.Index] != tk.Rows {
			t.Fatalf("got %v, want rows %v", got, want)
		}
	}
	// Two long prompts share the rows equally.
	q = []Request{{Left: 100}, {Left: 100}}
	got = Next(nil, q, 10, 64, 0)
	if len(got) != 2 || got[0].Rows != 5 || got[1].Rows != 5 {
		t.Fatalf("got %v, want 5 rows each", got)
	}
}

func TestNextProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 20000; iter++ {
		n := rng.IntN(12)
		q := make([]Request, n)
		for i := range q {
			q[i].Left = 1
			if rng.IntN(2) == 0 {
				q[i].Left = 1 + rng.IntN(200)
			}
		}
		maxRows, chunk := 1+rng.IntN(40), 1+rng.IntN(70)
		check(t, q, maxRows, chunk, Next(nil, q, maxRows, chunk, rng.IntN(100)))
	}
}

// TestNextServesEveryone runs passes until every request is done, with
// more requests than rows, and checks that none waits more than a bounded
// number of passes between two of its turns.
func TestNextServesEveryone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 200; iter++ {
		n := 1 + rng.IntN(20)
		q := make([]Request, n)
		for i := range q {
			q[i].Left = 1 + rng.IntN(50)
		}
		maxRows := 2 + rng.IntN(8) // one row: decoding always first
		last := make([]int, n)
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		for pass, start := 0, 0; len(q) > 0; pass, start = pass+1, start+1 {
			got := Next(nil, q, maxRows, 64, start)
			for _, tk := range got {
				q[tk.Index].Left -= tk.Rows
				last[ids[tk.Index]] = pass
			}
			for i := range q {
				if pass-last[ids[i]] > 2*n+2 {
					t.Fatalf("request %d waited %d passes (n=%d, max rows %d)", ids[i], pass-last[ids[i]], n, maxRows)
				}
			}
			k := 0
			for i := range q {
				if q[i].Left > 0 {
					q[k], ids[k] = q[i], ids[i]
					k++
				}
			}
			q, ids = q[:k], ids[:k]
		}
	}
}
