package planner

import (
	"math"
)

// Residency is the set of plans one budget moves between: the resting plan
// (Plans[0], what Plan returns: passes sized for decoding, the rest of the
// budget in pinned trunk parts and the expert cache) and plans of wider
// passes (Plans[1:], ascending rows), each the planner's split of the same
// budget for that many rows. Memory is never held for work that is not
// queued: while no prompt waits, the room a wide pass would need holds
// weights; when prompts wait and a wider pass reads fewer bytes for them,
// counting what the move itself costs, the engine moves to that plan and
// back once they are done (Choose decides; internal/engine carries it out).
// Every plan holds the same sessions' state, the same Go heap and the same
// prefix-cache tier; they differ only in the rows of a pass and where the
// rest of the budget goes, so the output is the same in all of them.
type Residency struct {
	Plans []*MemoryPlan

	// What pricing a pass needs: the trunk parts' read bytes (by unit), and
	// the routed experts: per MoE layer, top-k of Experts, ExpertBytes each,
	// Total in all.
	reads                 []int64
	experts, topK, layers int
	expertBytes           float64
	total                 float64
}

// Work is what waits for the next pass: DecodeRows sequences that feed one
// token (or a few drafted ones) each pass, and PromptRows prompt tokens
// still to prefill.
type Work struct {
	DecodeRows, PromptRows int
}

// populateShare prices the memory a move maps and fills (the new cache,
// ring and scratch are pre-faulted: zeroed by the kernel) in bytes read
// from disk: zeroing runs several times faster than a disk reads.
const populateShare = 0.25

// NewResidency returns the resting plan for req (Plan) and, when the
// planner chooses the rows (Request.Chunk and MaxBatch zero) under a
// budget, the plans of wider passes the budget holds: MinAutoRows and up
// by factors of √2 to every position the sessions hold. A wider plan keeps
// the resting plan's choice of resident embeddings (the model reads
// embeddings one way for its life), and is dropped if it cannot.
func NewResidency(w *Weights, req Request) (*Residency, error) {
	rest, err := Plan(w, req)
	if err != nil {
		return nil, err
	}
	c := w.Cfg
	r := &Residency{Plans: []*MemoryPlan{rest}, experts: c.Experts, topK: c.TopK, layers: max(c.Layers-c.FirstKDense, 0),
		expertBytes: float64(w.Sizes.ExpertBytes), total: float64(w.Sizes.Experts)}
	for _, pt := range w.Parts {
		r.reads = append(r.reads, pt.Read)
	}
	req = req.resolved()
	if req.MaxBatch > 0 || req.Budget <= 0 {
		return r, nil
	}
	limit := req.rowLimit()
	wr := req
	wr.PrefixRAM, wr.PrefixRAMAuto, wr.keepEmbed = rest.PrefixRAM, false, rest.EmbedResident
	for f := float64(MinAutoRows); ; f *= math.Sqrt2 {
		rows := min(int(f), limit)
		if rows > rest.Rows {
			mp, err := planRows(w, wr, rows, true)
			if err != nil {
				break // wider ones do not fit either
			}
			if mp.EmbedResident == rest.EmbedResident {
				r.Plans = append(r.Plans, mp)
			}
		}
		if rows == limit {
			break
		}
	}
	if req.Ranks > 1 && !req.Worker && len(r.Plans) > 1 {
		// Rank 0's cluster buffers grow with its widest pass and stay:
		// every plan counts those of the widest (a narrower plan that
		// pinned their room would make the process exceed its budget
		// after a prefill). The widest plan whose buffers the others
		// can hold too is kept, and the ones below it.
		r.Plans = clusterPlans(w, req, wr, r.Plans)
	}
	return r, nil
}

// clusterPlans re-plans a cluster rank 0's resting and wider plans so
// that each counts the cluster buffers of the widest of them, dropping the
// widest ones while the resting plan cannot hold their buffers. Without a
// wider plan left, the resting plan is planned alone.
func clusterPlans(w *Weights, req, wr Request, plans []*MemoryPlan) []*MemoryPlan {
	for top := len(plans) - 1; top >= 1; top-- {
		cr := req
		cr.clusterRows, cr.clusterTile = plans[top].Rows, plans[top].Tile
		rest, err := Plan(w, cr)
		if err != nil {
			continue
		}
		out := []*MemoryPlan{rest}
		wr := wr
		wr.PrefixRAM, wr.clusterRows, wr.clusterTile = rest.PrefixRAM, cr.clusterRows, cr.clusterTile
		for _, p := range plans[1 : top+1] {
			mp, err := planRows(w, wr, p.Rows, true)
			if err != nil || mp.EmbedResident != rest.EmbedResident {
				break
			}
			out = append(out, mp)
		}
		return out
	}
	return plans[:1]
}

// Union returns the expected number of distinct experts per MoE layer that
// rows rows choose, each top-k of the layer's experts, with routing spread
// evenly (a trained router is close to it on different sequences; rows of
// one sequence overlap more, so this errs towards more bytes).
func (r *Residency) Union(rows int) float64 {
	if r.experts == 0 || rows <= 0 {
		return 0
	}
	return float64(r.experts) * (1 - math.Pow(1-float64(r.topK)/float64(r.experts), float64(rows)))
}

// PassBytes estimates what one pass of rows rows reads under plan i: the
// streamed trunk once, and the union of the experts its rows chose that
// the cache does not hold (a warm cache of S slots holds a chosen expert
// with probability S / experts, routing being spread evenly).
func (r *Residency) PassBytes(i, rows int) float64 {
	p := r.Plans[i]
	hit := 0.0
	if r.total > 0 {
		hit = min(1, float64(p.CacheSlots)/r.total)
	}
	return float64(p.TrunkBytesPerPass) + float64(r.layers)*r.Union(rows)*r.expertBytes*(1-hit)
}

// moveBytes prices moving from plan a to plan b, in bytes read: the parts
// b pins that a does not (read again), the expert cache's warm contents
// (a new cache starts empty: the hits a's cache would have given until a
// cache warms up again), and the memory b maps and fills.
func (r *Residency) moveBytes(a, b int) float64 {
	if a == b {
		return 0
	}
	pa, pb := r.Plans[a], r.Plans[b]
	var read float64
	for u, pinned := range pb.Pinned {
		if pinned && !pa.Pinned[u] {
			read += float64(r.reads[u])
		}
	}
	warm := 0.0
	if r.total > 0 {
		slots := min(float64(pa.CacheSlots), r.total)
		warm = slots * r.expertBytes * min(1, slots/r.total)
	}
	mapped := BufferBytes(int64(pb.CacheSlots)*pb.CacheSlotBytes) + BufferBytes(pb.ScratchArena) + BufferBytes(int64(pb.RingSlots)*pb.RingSlotBytes)
	return read + warm + populateShare*float64(mapped)
}

// Cost prices the work w under plan i when the engine is in plan cur: the
// move there, its passes (decode rows ride along in every pass, prompt
// rows fill the rest), and, for a wide plan, the move back to the resting
// plan once the prompts are done.
func (r *Residency) Cost(cur, i int, w Work) float64 {
	p := r.Plans[i]
	cost := r.moveBytes(cur, i)
	if i != 0 {
		cost += r.moveBytes(i, 0)
	}
	if w.PromptRows <= 0 {
		if w.DecodeRows > 0 {
			cost += r.PassBytes(i, min(w.DecodeRows, p.Rows))
		}
		return cost
	}
	perPass := max(p.Rows-w.DecodeRows, 1)
	full, rest := w.PromptRows/perPass, w.PromptRows%perPass
	cost += float64(full) * r.PassBytes(i, min(p.Rows, w.DecodeRows+perPass))
	if rest > 0 {
		cost += r.PassBytes(i, min(p.Rows, w.DecodeRows+rest))
	}
	return cost
}

// Passes returns the passes work w takes under plan i: the prompt rows in
// passes of the plan's rows less the decode rows riding along, or one for
// decoding alone.
func (r *Residency) Passes(i int, w Work) int {
	if w.PromptRows <= 0 {
		return 1
	}
	perPass := max(r.Plans[i].Rows-w.DecodeRows, 1)
	return (w.PromptRows + perPass - 1) / perPass
}

// Choose returns the plan for the work queued now, the engine being in
// plan cur: the resting plan when no prompt waits (decode reads least
// there: the budget holds weights, not room for rows that do not come);
// otherwise the plan whose move and passes read least for the prompts
// waiting, staying put on a tie. It allocates nothing.
func (r *Residency) Choose(cur int, w Work) int {
	if w.PromptRows <= 0 || len(r.Plans) == 1 {
		return 0
	}
	best, bestCost := cur, r.Cost(cur, cur, w)
	for i := range r.Plans {
		if c := r.Cost(cur, i, w); c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}
