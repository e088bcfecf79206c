package model

import "math"

// PassRounds counts the rounds of one cluster pass and what they carry:
// what a projection of a cluster (k3 plan --ranks) prices without running
// one. CountRounds computes it from the same structure the pass follows
// (the rounds of kda, mla, denseFFN, moe and tileLogits, the chunks of
// expertRounds), and a test compares it with the rounds of real passes.
type PassRounds struct {
	// Rounds is the pass's rounds: each one's inputs go from rank 0 to
	// every other rank and their rows of its products come back (one
	// gather).
	Rounds int
	// Inputs and Products count the inputs and the products of every
	// round (each has a few bytes of a round's header); the experts' are
	// estimates from the mean union, hence fractions.
	Inputs, Products float64
	// InputFloats sums the floats of every round's inputs and the picks
	// of the experts' rows (4 bytes each, as a float): what rank 0 sends
	// to each other rank beside the tables.
	InputFloats int64
	// Out maps the rows of a product's whole matrix to the input rows (N)
	// of every product of a matrix of that height: the products' outputs
	// are the sum of rows × Out[rows] floats, and rank r computes
	// hi-lo of each matrix's rows (RowRange(rows, r, ranks)).
	Out map[int]int64
	// HeadRows counts the rows of the KDA layers' RoundKDA outputs
	// (HeadWidth floats each, split over the ranks in whole heads of
	// HeadDim, UnitRange), and Seqs their sequences' entries (a
	// sequence's per tile it has rows in, per KDA layer).
	HeadRows           int64
	HeadWidth, HeadDim int
	Seqs               int64
}

// CountRounds returns the rounds of one pass (one sub-pass of
// ForwardBatch: rows at most its Scratch's) of rows token rows of seqs
// sequences of equal length (rows/seqs, rounded up) in tiles of tile rows
// (0: DefaultTile), logitRows of which want logits, whose MoE layers each
// route to union distinct experts (the mean over the layers), on ranks
// that keep the KDA heads (StateRanks) and a pass that does not
// speculate.
//
// Per tile of rows, a KDA layer takes two rounds (every rank's heads of
// the layer up to their gated outputs, RoundKDA; the output projection),
// an MLA layer three (q_a, kv_a and the output
// gate; q_b; the output projection), a dense FFN two (gate with up, one
// GLU product whose activation each rank applies to its rows; down),
// a MoE layer's trunk three or four (the router; the latent down
// projection with the shared experts' gate and up; the shared experts'
// down, if any, unless the pass is one tile, when it rides in the first
// expert round; the latent up projection); the output head one per tile
// of the rows wanting logits. A MoE layer's routed experts take two rounds
// (their gate and up rows; their down rows) per chunk of (row, expert)
// pairs for the whole pass: one chunk when the pass's rows × top-k fit
// the chunk (every decoding pass of up to 256 / top-k sequences), so the
// count is exact; beyond it the chunks are estimated by packing union
// experts of equal use, as expertRounds packs whole experts.
func CountRounds(c *Config, rows, seqs, tile, logitRows int, union float64) PassRounds {
	rows = max(rows, 0)
	if tile <= 0 {
		tile = DefaultTile
	}
	r := PassRounds{Out: map[int]int64{}, HeadWidth: c.KDAWidth(), HeadDim: c.KDAHeadDim}
	if rows == 0 {
		return r
	}
	tiles := (rows + tile - 1) / tile
	// The sequences' entries of a tile's RoundKDA: those with rows in it.
	perSeq := (rows + max(seqs, 1) - 1) / max(seqs, 1)
	entries := int64(0)
	for a := 0; a < rows; a += tile {
		b := min(a+tile, rows)
		entries += int64((b-1)/perSeq - a/perSeq + 1)
	}
	R := int64(rows)
	// round adds one round of n inputs (floats in all, summed over the
	// pass's tiles) to every tile, and its products' rows.
	round := func(inputs int, floats int64, mats ...int) {
		r.Rounds += tiles
		r.Inputs += float64(tiles * inputs)
		r.Products += float64(tiles * len(mats))
		r.InputFloats += floats
		for _, h := range mats {
			r.Out[h] += R
		}
	}
	E, P := c.Hidden, c.KDAWidth()
	H, vh := c.MLAHeads, c.VHeadDim
	Lt, I, S := c.LatentDim, c.MoEIntermediate, c.SharedExperts*c.MoEIntermediate
	moeLayers := 0
	for l := 0; l < c.Layers; l++ {
		if c.IsMLA(l) {
			mats := []int{c.QLoraRank, c.KVLoraRank + c.QKRopeDim}
			if c.MLAOutputGate {
				mats = append(mats, H*vh)
			}
			round(1, R*int64(E), mats...)
			round(1, R*int64(c.QLoraRank), H*c.MLAHeadDim())
			round(1, R*int64(H*vh), E)
		} else {
			round(1, R*int64(E))
			r.Products += float64(tiles)
			r.HeadRows += R
			r.Seqs += entries
			round(1, R*int64(P), E)
		}
		if c.IsDense(l) {
			round(1, R*int64(E), c.DenseIntermediate) // gate with up: one GLU product
			round(1, R*int64(c.DenseIntermediate), E)
			continue
		}
		moeLayers++
		round(1, R*int64(E), c.Experts)
		if S > 0 {
			round(1, R*int64(E), Lt, S) // the shared gate with up: one GLU product
			if tiles == 1 {
				// The shared experts' down projection rides in the
				// first expert round (pass.sharedRides).
				r.Inputs++
				r.Products++
				r.InputFloats += R * int64(S)
				r.Out[E] += R
			} else {
				round(1, R*int64(S), E)
			}
		} else {
			round(1, R*int64(E), Lt)
		}
		round(1, R*int64(Lt), E)
	}
	if moeLayers > 0 {
		users := rows * c.TopK
		u := int64(users)
		pieces := expertPieces(float64(users), union, expertChunk(c, rows))
		n := float64(moeLayers)
		r.Rounds += 2 * pieces * moeLayers
		// Up: one input per piece, the distinct rows its pairs chose
		// from (every row, in a one-piece pass; else the expected
		// distinct rows of a piece's share of pairs drawn from the rows),
		// each pair's pick of one, and one GLU product of w1 with w3 per
		// expert; down: each expert's users' SiTU-GLU rows through w2.
		distinct := float64(rows)
		if pieces > 1 {
			distinct = float64(pieces) * float64(rows) * (1 - math.Pow(1-1/float64(rows), float64(users)/float64(pieces)))
		}
		r.Inputs += n * (float64(pieces) + union)
		r.Products += 2 * n * union
		r.InputFloats += int64(moeLayers) * (int64(math.Round(distinct*float64(Lt))) + u + u*int64(I))
		r.Out[I] += int64(moeLayers) * u
		r.Out[Lt] += int64(moeLayers) * u
	}
	if logitRows = min(logitRows, rows); logitRows > 0 {
		t := (logitRows + tile - 1) / tile
		r.Rounds += t
		r.Inputs += float64(t)
		r.Products += float64(t)
		r.InputFloats += int64(logitRows) * int64(E)
		r.Out[c.Vocab] += int64(logitRows)
	}
	return r
}

// expertPieces is the pieces expertRounds cuts users (row, expert) pairs
// of union experts into, chunks of at most limit pairs of whole experts
// (an expert with more pairs than a chunk alone, in pieces of limit), if
// every expert had the same number of pairs. All in one chunk when they
// fit it.
func expertPieces(users, union float64, limit int) int {
	if users <= float64(limit) {
		return 1
	}
	union = max(union, 1)
	per := users / union // pairs of each expert
	if per >= float64(limit) {
		return int(math.Ceil(union)) * int(math.Ceil(per/float64(limit)))
	}
	fit := math.Floor(float64(limit) / per) // whole experts per chunk
	return int(math.Ceil(union / fit))
}
