// Package sched is the scheduling policy of k3's continuous batching: a
// pure function from the steps waiting for the model to the rows of the
// next pass over the weights. It knows nothing of models or goroutines, so
// it can be tested exhaustively.
package sched

// Request is one waiting step as the policy sees it.
type Request struct {
	// Left is the number of tokens the step still has to feed (at least
	// one).
	Left int
}

// Take is one request's share of a pass: Rows tokens of Queue[Index].
type Take struct {
	Index, Rows int
}

// Next chooses the next pass over q (in arrival order) and appends it to
// dst. Decoding steps (one token left) come first, so a long prompt never
// delays the sequences that are generating (while prompts wait, one row of
// a pass is kept for them, so they cannot starve either); prefill steps
// share the rows
// that are left, as equally as their lengths allow, each at most chunk
// rows per pass, so that no prompt starves another. The pass carries at
// most maxRows rows. start rotates the order in which requests are
// considered when there are more of them than rows: the caller advances it
// from pass to pass, so every request is served within a bounded number
// of passes. Every request gets at most what it has left; a non-empty q
// always yields a non-empty pass.
func Next(dst []Take, q []Request, maxRows, chunk, start int) []Take {
	n := len(q)
	if n == 0 || maxRows <= 0 {
		return dst
	}
	chunk = max(chunk, 1)
	start = ((start % n) + n) % n
	var prefill int
	for i := range q {
		if q[i].Left > 1 {
			prefill++
		}
	}
	// Decoding rows first; but while prompts wait, one row stays theirs,
	// so that no number of generating sequences starves a new one.
	decodeRows := maxRows
	if prefill > 0 && maxRows > 1 {
		decodeRows--
	}
	rows := 0
	for k := 0; k < n && rows < decodeRows; k++ {
		i := (start + k) % n
		if q[i].Left == 1 {
			dst = append(dst, Take{Index: i, Rows: 1})
			rows++
		}
	}
	// Prefill: water-fill what is left, in rounds, each request capped by
	// chunk and by what it has left.
	if prefill == 0 || rows >= maxRows {
		return dst
	}
	first := len(dst)
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if q[i].Left > 1 {
			dst = append(dst, Take{Index: i})
		}
	}
	takes := dst[first:]
	for rows < maxRows {
		open := 0
		for _, t := range takes {
			if t.Rows < min(q[t.Index].Left, chunk) {
				open++
			}
		}
		if open == 0 {
			break
		}
		share := max((maxRows-rows)/open, 1)
		for j := range takes {
			t := &takes[j]
			room := min(q[t.Index].Left, chunk) - t.Rows
			give := min(room, share, maxRows-rows)
			if give > 0 {
				t.Rows += give
				rows += give
			}
			if rows == maxRows {
				break
			}
		}
	}
	// Drop prefill requests that got nothing this pass.
	out := dst[:first]
	for _, t := range takes {
		if t.Rows > 0 {
			out = append(out, t)
		}
	}
	return out
}
