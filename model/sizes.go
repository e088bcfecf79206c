package model

import "github.com/k3go/k3/expert"

// WeightSizes are a checkpoint's weight sizes in bytes and its work per
// token: what the model is, independent of where its bytes live (the
// trunk's buffers depend on how it is read; see internal/engine/planner).
type WeightSizes struct {
	// LMHead and Embed are the output head and the token embeddings;
	// Vectors the norms, biases and other small per-layer vectors (widened
	// to f32, resident).
	LMHead, Embed, Vectors int64
	// Tensors counts the checkpoint's tensors (the index's memory).
	Tensors int
	// TrunkPayload is the matrix bytes of every dense layer part.
	TrunkPayload int64
	// ExpertBytes is one routed expert; ExpertSlot its cache slot (the
	// largest expert's read window); Experts the routed experts in the
	// checkpoint; ExpertsPerTok those one token uses (top-k × MoE layers).
	ExpertBytes, ExpertSlot, Experts, ExpertsPerTok int64
	// Multiply-adds per token: every trunk matrix once (TrunkMACs), one
	// routed expert (ExpertMACs), the output head (LMHeadMACs).
	TrunkMACs, ExpertMACs, LMHeadMACs int64
}

// Sizes returns the plan's weight sizes.
func (p *Plan) Sizes() WeightSizes {
	x := p.experts
	s := WeightSizes{LMHead: p.lmHead.Size, Embed: p.embed.Size, Tensors: p.Ckpt.Len(),
		ExpertBytes: x.ExpertBytes(), ExpertSlot: x.SlotBytes(), Experts: x.Count()}
	for l := range p.vecs {
		s.Vectors += vecBytes(&p.vecs[l])
	}
	s.Vectors += int64(len(p.finalNorm)+len(p.foldO)+len(p.outNorm)+len(p.outProj)) * 4
	for u := range p.parts {
		s.TrunkPayload += p.parts[u].Payload
		for _, m := range p.parts[u].Tensors {
			s.TrunkMACs += int64(m.Rows) * int64(m.Cols)
		}
	}
	c := p.Cfg
	s.ExpertMACs = 3 * int64(c.MoEIntermediate) * int64(c.LatentDim)
	s.LMHeadMACs = int64(c.Vocab) * int64(c.Hidden)
	for l := 0; l < x.Layers(); l++ {
		if x.Experts(l) > 0 {
			s.ExpertsPerTok += int64(c.TopK)
		}
	}
	return s
}

// Parts returns the image layout of every dense layer part, by Unit. The
// layouts belong to the plan: read only.
func (p *Plan) Parts() []PartLayout { return p.parts }

// Experts returns the index of the routed experts: where each one's bytes
// are and how its matrices bind.
func (p *Plan) Experts() *expert.Index { return p.experts }

func vecBytes(v *LayerVecs) int64 {
	n := 0
	for _, x := range [][]float32{v.InNorm, v.PostNorm, v.FoldA, v.FoldM, v.resNormA, v.resProjA, v.resNormM, v.resProjM,
		v.QConv, v.KConv, v.VConv, v.ALog, v.DTBias, v.ONorm, v.QANorm, v.KVANorm, v.Bias, v.LatentNorm} {
		n += len(x)
	}
	return int64(n) * 4
}

// SpecRecordBytes returns the bytes a State records for a speculative pass
// of rows rows (BeginSpeculation), besides its copy of the KDA state.
func SpecRecordBytes(c *Config, rows int) int64 { return specRecordBytes(c, c.KDAHeads, rows) }

// specRecordBytes is what a specRecord over nh heads holds for rows rows
// besides its copy of them: every KDA layer's rows of 4W + nh recurrence
// inputs (W = nh·D), and the replay's outputs (W).
func specRecordBytes(c *Config, nh, rows int) int64 {
	nKDA := int64(c.Layers - c.NumMLA())
	W := int64(nh * c.KDAHeadDim)
	return 4 * (nKDA*int64(rows)*(4*W+int64(nh)) + W)
}

// ScratchBytes returns the bytes NewScratch allocates for passes of rows
// token rows in tiles of tile rows, plus what a pass allocates beside it
// (ScratchHeapBytes).
func ScratchBytes(c *Config, rows, tile, maxContext int) int64 {
	rows, tc := scratchShape(rows, tile)
	var n int64
	for _, s := range scratchSizes(c, rows, tc) {
		n += int64(s)
	}
	return n*4 + ScratchHeapBytes(c, tc, maxContext)
}

// ScratchHeapBytes returns what a pass in tiles of tile rows allocates on
// the heap beside its Scratch, whether the Scratch is on the heap or in
// lent memory (NewScratchIn): the per-head score buffers for maxContext
// positions, the router's rows widened to float64, and the kernels'
// packed copies of a product's input rows (both per tile).
func ScratchHeapBytes(c *Config, tile, maxContext int) int64 {
	tc := max(tile, 1)
	n := int64(c.MLAHeads) * int64(2*c.KVLoraRank+maxContext)
	// Each head's queries widened to float64 (mla_attend.go): two floats.
	n += int64(c.MLAHeads) * 2 * int64(c.KVLoraRank+c.QKRopeDim)
	// The router's rows widened to float64 (tensor.MatMulF64Acc).
	n += 2 * int64(tc) * int64(c.Hidden)
	// The kernels' packed copy of a product's input rows (pooled, its
	// capacity rounded up to a power of two), for the widest input; twice,
	// for the one the collector has not yet taken back.
	if tc > 1 {
		widest := max(c.Hidden, c.DenseIntermediate, c.SharedExperts*c.MoEIntermediate, c.KDAWidth(),
			c.MLAHeads*c.VHeadDim, c.LatentDim, c.MoEIntermediate, c.QLoraRank)
		n += 2 * int64(nextPow2(tc*widest))
	}
	return n * 4
}

// nextPow2 returns the smallest power of two ≥ n (at least 1024, as the
// kernels' buffer pool rounds).
func nextPow2(n int) int {
	c := 1024
	for c < n {
		c *= 2
	}
	return c
}

// expertChunk is the most (row, expert) pairs one chunk of a cluster
// pass's expert rounds holds for a pass of rows rows (expertRounds).
func expertChunk(c *Config, rows int) int {
	users := max(rows, 1) * c.TopK
	return min(users, max(expertChunkUsers, 2*((users+c.Experts-1)/max(c.Experts, 1))))
}

// roundFloats is the most floats one round of a cluster pass carries, its
// inputs and its outputs together, for passes of rows rows in tiles of
// tile: a tile's widest layer products, a chunk of expert rows, a tile's
// logits.
func roundFloats(c *Config, rows, tile int) int64 {
	T := int64(min(tile, max(rows, 1)))
	wide := int64(max(c.DenseIntermediate, c.SharedExperts*c.MoEIntermediate, c.KDAWidth(), c.MLAHeads*c.MLAHeadDim()))
	layer := T * (int64(c.Hidden) + 6*wide + int64(c.Experts))
	u := int64(expertChunk(c, rows))
	experts := u * (int64(c.LatentDim) + 2*int64(c.MoEIntermediate))
	head := T * (int64(c.Hidden) + int64(c.Vocab))
	return max(layer, experts, head)
}

// ClusterScratchBytes returns what rank 0 of a cluster holds beside its
// Scratch for passes of rows rows in tiles of tile: the chunk of expert
// rows (their distinct latent inputs, each pair's pick of one, the up
// halves' and down halves' results), a tile of logits, the buffers the
// workers' replies arrive in (at most one round's outputs in all), and
// what its own share of a round gathers a product's picked rows and a GLU
// product's up rows into (at most one round's floats).
func ClusterScratchBytes(c *Config, rows, tile int) int64 {
	u := int64(expertChunk(c, rows))
	chunk := u * (2*int64(c.LatentDim) + int64(c.MoEIntermediate) + 1)
	logits := int64(min(tile, max(rows, 1))) * int64(c.Vocab)
	return 4 * (chunk + logits + 2*roundFloats(c, rows, tile) + kdaHeadFloats(c, rows, tile))
}

// kdaHeadFloats bounds what a rank's share of a RoundKDA round works in
// (kdaHeads): its heads' q, k, v, g and decay rows, β, and the decay's
// first projection, for a tile of rows (every head, the most a rank has).
func kdaHeadFloats(c *Config, rows, tile int) int64 {
	if c.NumMLA() == c.Layers {
		return 0
	}
	T := int64(min(tile, max(rows, 1)))
	return T * (5*int64(c.KDAWidth()) + 2*int64(c.KDAHeads) + int64(c.KDAHeadDim))
}

// WorkerBufferBytes returns what a rank other than 0 holds to serve rounds
// of passes of up to rows rows in tiles of tile: the largest round as
// received, its rows of the products, the rows a product gathers its
// picked inputs and a GLU product its up rows into, and what its heads of
// a KDA layer work in. (Its heads of the sequences' KDA states are not
// here: they grow with rank 0's sequences, HeadStore.Bytes each.)
func WorkerBufferBytes(c *Config, rows, tile int) int64 {
	return 4 * (3*roundFloats(c, rows, tile) + kdaHeadFloats(c, rows, tile))
}
