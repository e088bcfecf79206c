package planner

// MaxContext returns the largest context, at most limit positions, that
// req.Budget holds for req.Sessions sessions: the largest MaxContext with
// which Plan(w, req) succeeds, so that a context chosen with it always
// plans (Plan's floor decides, with the rows Plan chooses). It is 0 when
// not even one position fits (the budget is below the floor), and limit
// without a budget (everything resident: nothing bounds the context but
// the machine, which the caller checks).
func MaxContext(w *Weights, req Request, limit int) int {
	if limit < 1 {
		return 0
	}
	fits := func(n int) bool {
		r := req
		r.MaxContext = n
		_, err := Plan(w, r)
		return err == nil
	}
	if req.Budget <= 0 || fits(limit) {
		return limit
	}
	if !fits(1) {
		return 0
	}
	// A larger context needs more of the budget (its KV cache, the
	// attention scores of a pass), so the contexts that fit are 1..n.
	lo, hi := 1, limit // fits(lo), !fits(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
