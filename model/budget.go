package model

import (
	"errors"
	"fmt"
	"github.com/k3go/k3/iox"
	"sort"
	"strings"
)

// ErrBudget reports a RAM budget that cannot hold the model's fixed floor.
var ErrBudget = errors.New("RAM budget too small")

// BudgetRequest is what the memory planner needs to know about the run.
type BudgetRequest struct {
	// Budget is the hard limit in bytes; zero means unlimited (everything
	// resident).
	Budget int64
	// Sessions is the number of sequences that may hold state at once.
	Sessions int
	// MaxContext is the positions each session may hold.
	MaxContext int
	// Chunk is the prefill chunk (tokens of one sequence per pass).
	Chunk int
	// MaxBatch is the most token rows of one pass, summed over its
	// sequences; zero means Chunk. The scratch of the pass is sized for it
	// and counted once, not per session.
	MaxBatch int
	// Speculate is the most drafted tokens per speculative pass; each
	// session then holds a copy of its KDA state and a record of its rows.
	Speculate int
}

// MemoryPlan says where every byte of the budget goes. The plan decides
// only where bytes live and when they are read, never the arithmetic: the
// output is identical under every plan.
type MemoryPlan struct {
	Budget int64 // 0 = unlimited

	// Fixed floor. State and KV are for Sessions sessions; Scratch is one
	// pass of Rows rows.
	LMHead, Embed, Vectors, State, KV, Scratch, Overhead int64
	EmbedResident                                        bool
	Sessions, Rows                                       int

	// Trunk: pinned parts stay resident; the rest stream through a ring.
	Pinned        []bool // by unit(layer, part)
	PinnedBytes   int64
	PinnedLayers  int // layers with both parts pinned
	RingSlots     int
	RingSlotBytes int64
	// A compressed packed trunk is read into staging buffers and decoded
	// from there into the part buffers: one per ring slot (one for loading
	// when every part is pinned).
	StagingBuffers int
	StagingBytes   int64

	// Expert cache.
	CacheSlots     int
	CacheSlotBytes int64

	// TrunkBytesPerPass is what one forward pass reads of the trunk.
	TrunkBytesPerPass int64
}

// Total returns the planned bytes.
func (p *MemoryPlan) Total() int64 {
	t := p.LMHead + p.Vectors + p.State + p.KV + p.Scratch + p.Overhead + p.PinnedBytes +
		int64(p.RingSlots)*p.RingSlotBytes + int64(p.CacheSlots)*p.CacheSlotBytes +
		int64(p.StagingBuffers)*p.StagingBytes
	if p.EmbedResident {
		t += p.Embed
	}
	return t
}

// Streaming reports whether any trunk part streams.
func (p *MemoryPlan) Streaming() bool { return p.RingSlots > 0 }

// String is a human report of the plan.
func (p *MemoryPlan) String() string {
	var b strings.Builder
	gb := Human
	budget := "unlimited"
	if p.Budget > 0 {
		budget = gb(p.Budget)
	}
	fmt.Fprintf(&b, "memory plan (budget %s, planned %s)\n", budget, gb(p.Total()))
	emb := "read per token"
	if p.EmbedResident {
		emb = gb(p.Embed)
	}
	fmt.Fprintf(&b, "  lm_head %s, embeddings %s, vectors %s\n", gb(p.LMHead), emb, gb(p.Vectors))
	fmt.Fprintf(&b, "  %d sessions: state %s, KV cache %s; scratch %s for %d rows per pass; overhead %s\n",
		p.Sessions, gb(p.State), gb(p.KV), gb(p.Scratch), p.Rows, gb(p.Overhead))
	n := 0
	for _, x := range p.Pinned {
		if x {
			n++
		}
	}
	fmt.Fprintf(&b, "  trunk: %d of %d parts pinned (%d whole layers, %s); ring %d × %s; %s read per pass\n",
		n, len(p.Pinned), p.PinnedLayers, gb(p.PinnedBytes), p.RingSlots, gb(p.RingSlotBytes), gb(p.TrunkBytesPerPass))
	if p.StagingBuffers > 0 {
		fmt.Fprintf(&b, "  compressed trunk: %d staging × %s\n", p.StagingBuffers, gb(p.StagingBytes))
	}
	fmt.Fprintf(&b, "  expert cache: %d slots × %s = %s", p.CacheSlots, gb(p.CacheSlotBytes), gb(int64(p.CacheSlots)*p.CacheSlotBytes))
	return b.String()
}

// Floors and overheads the planner adds to what it can count exactly.
const (
	// runtimeOverhead covers the Go runtime, goroutine stacks, the worker
	// pool and the I/O layer's bookkeeping.
	runtimeOverhead = 48 << 20
	// perTensorOverhead is the checkpoint index's memory per tensor.
	perTensorOverhead = 320
	// perSessionVocabBytes is what a session holds per vocabulary entry
	// outside its state: its logits (4 bytes) and its sampler's logits,
	// order and probabilities (4 + 4 + 8).
	perSessionVocabBytes = 20
)

// PlanMemory splits the budget: the fixed floor first (lm_head, vectors,
// per-session state and scratch, the smallest expert cache that works,
// K+1 slots), then the trunk (pinned parts, largest first, so that the
// ring slots shrink; two ring slots so reads overlap compute), then
// whatever is left to the expert cache. It fails with ErrBudget if the
// floor does not fit, naming what is needed.
func (p *Plan) PlanMemory(req BudgetRequest) (*MemoryPlan, error) {
	c := p.Cfg
	if req.Sessions <= 0 {
		req.Sessions = 1
	}
	if req.Chunk <= 0 {
		req.Chunk = 64
	}
	if req.MaxBatch <= 0 {
		req.MaxBatch = req.Chunk
	}
	mp := &MemoryPlan{Budget: req.Budget, Pinned: make([]bool, len(p.parts)), Sessions: req.Sessions}
	// A pass never carries more rows than the sessions can feed.
	mp.Rows = min(req.MaxBatch, max(req.Sessions*req.MaxContext, 1))
	mp.LMHead = p.lmHead.Size
	mp.Embed = p.embed.Size
	for l := range p.vecs {
		mp.Vectors += vecBytes(&p.vecs[l])
	}
	mp.Vectors += int64(len(p.finalNorm)+len(p.foldO)+len(p.outNorm)+len(p.outProj)) * 4
	fixed, perPos := StateBytes(c)
	s := int64(req.Sessions)
	mp.State = s * fixed
	if req.Speculate > 0 {
		mp.State += s * (fixed + SpecRecordBytes(c, req.Speculate+1))
	}
	mp.KV = s * perPos * int64(req.MaxContext)
	mp.Scratch = scratchBytes(c, mp.Rows, req.MaxContext)
	mp.Overhead = runtimeOverhead + int64(p.Ckpt.Len())*perTensorOverhead +
		s*perSessionVocabBytes*int64(c.Vocab)
	mp.CacheSlotBytes = iox.AlignUp(p.experts.SlotBytes())
	minCache := int64(c.TopK+1) * mp.CacheSlotBytes

	var trunk int64
	for u := range p.parts {
		trunk += p.parts[u].bytes
	}
	totalExperts := p.experts.Count()
	staging := p.stagingBytes()
	if req.Budget == 0 {
		// Unlimited: everything resident.
		mp.EmbedResident = true
		for u := range mp.Pinned {
			mp.Pinned[u] = true
		}
		mp.PinnedBytes, mp.PinnedLayers = trunk, c.Layers
		mp.CacheSlots = int(totalExperts)
		if staging > 0 {
			mp.StagingBuffers, mp.StagingBytes = 1, staging
		}
		return mp, nil
	}
	base := mp.LMHead + mp.Vectors + mp.State + mp.KV + mp.Scratch + mp.Overhead + minCache

	// Parts by size, largest first.
	order := make([]int, len(p.parts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p.parts[order[a]].bytes > p.parts[order[b]].bytes })
	// Try to pin the k largest parts, k from all down to none, with two ring
	// slots, then with one.
	fits := func(k, slots int) (int64, bool) {
		var pinned int64
		for _, u := range order[:k] {
			pinned += p.parts[u].bytes
		}
		var slot int64
		if k < len(order) {
			slot = p.parts[order[k]].bytes
		} else {
			slots = 0
		}
		need := base + pinned + int64(slots)*slot
		if staging > 0 {
			need += int64(max(slots, 1)) * staging
		}
		return need, need <= req.Budget
	}
	chosenK, chosenSlots := -1, 0
	for _, slots := range []int{2, 1} {
		for k := len(order); k >= 0; k-- {
			if _, ok := fits(k, slots); ok {
				chosenK, chosenSlots = k, slots
				break
			}
		}
		if chosenK >= 0 {
			break
		}
	}
	if chosenK < 0 {
		need, _ := fits(0, 1)
		return nil, fmt.Errorf("%w: the floor needs %s (lm_head %s, vectors %s, state %s, KV cache %s for %d positions × %d sessions, scratch %s, overhead %s, %d expert slots %s, one ring slot %s, compressed-trunk staging %s); the budget is %s",
			ErrBudget, Human(need), Human(mp.LMHead), Human(mp.Vectors), Human(mp.State), Human(mp.KV), req.MaxContext, req.Sessions,
			Human(mp.Scratch), Human(mp.Overhead), c.TopK+1, Human(minCache), Human(p.parts[order[0]].bytes), Human(staging), Human(req.Budget))
	}
	need, _ := fits(chosenK, chosenSlots)
	for _, u := range order[:chosenK] {
		mp.Pinned[u] = true
		mp.PinnedBytes += p.parts[u].bytes
	}
	if chosenK < len(order) {
		mp.RingSlots, mp.RingSlotBytes = chosenSlots, p.parts[order[chosenK]].bytes
	}
	if staging > 0 {
		mp.StagingBuffers, mp.StagingBytes = max(mp.RingSlots, 1), staging
	}
	for l := 0; l < c.Layers; l++ {
		if mp.Pinned[unit(l, PartAttn)] && mp.Pinned[unit(l, PartFFN)] {
			mp.PinnedLayers++
		}
	}
	for u := range p.parts {
		if !mp.Pinned[u] {
			if cp := p.parts[u].comp; cp != nil {
				mp.TrunkBytesPerPass += cp.stored
			} else {
				mp.TrunkBytesPerPass += p.parts[u].payload
			}
		}
	}
	// The rest feeds the expert cache (and the embeddings, once the cache
	// could hold every expert).
	left := req.Budget - need
	mp.CacheSlots = c.TopK + 1 + int(left/max(mp.CacheSlotBytes, 1))
	if int64(mp.CacheSlots) > totalExperts {
		mp.CacheSlots = int(max(totalExperts, int64(c.TopK+1)))
		if mp.Total()+mp.Embed <= req.Budget {
			mp.EmbedResident = true
		}
	}
	return mp, nil
}

// Human formats a byte count with a decimal unit ("8.24 GB", "512.0 kB").
func Human(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e12:
		return fmt.Sprintf("%.2f TB", f/1e12)
	case f >= 1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.1f kB", f/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

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
func SpecRecordBytes(c *Config, rows int) int64 {
	nKDA := int64(c.Layers - c.NumMLA())
	return nKDA*int64(rows)*int64(4*c.KDAWidth()+c.KDAHeads)*4 + int64(c.KDAWidth())*4
}

// scratchBytes returns the bytes NewScratch allocates for tc rows, plus
// the per-head score buffers for maxContext positions.
func scratchBytes(c *Config, tc, maxContext int) int64 {
	sizes := scratchSizes(c, tc)
	var n int64
	for _, s := range sizes {
		n += int64(s)
	}
	n += int64(c.MLAHeads) * int64(2*c.KVLoraRank+maxContext)
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

// Sizes summarises the bytes of a plan's weights.
type Sizes struct {
	TrunkPayload  int64 // matrix bytes of every layer part
	TrunkBuffers  int64 // buffer bytes of every layer part (alignment included)
	LargestPart   int64
	ExpertBytes   int64 // one routed expert
	Experts       int64 // routed experts in the checkpoint
	ExpertsPerTok int64 // routed experts used per token (K × MoE layers)
	LMHead, Embed int64
	// Multiply-adds per token: every trunk matrix once, one routed expert,
	// the lm_head.
	TrunkMACs, ExpertMACs, LMHeadMACs int64
}

// Sizes returns the plan's weight sizes.
func (p *Plan) Sizes() Sizes {
	s := Sizes{LMHead: p.lmHead.Size, Embed: p.embed.Size, ExpertBytes: p.experts.ExpertBytes(), Experts: p.experts.Count()}
	for u := range p.parts {
		s.TrunkPayload += p.parts[u].payload
		s.TrunkBuffers += p.parts[u].bytes
		s.LargestPart = max(s.LargestPart, p.parts[u].bytes)
		for _, m := range p.parts[u].mats {
			s.TrunkMACs += int64(m.rows) * int64(m.cols)
		}
	}
	c := p.Cfg
	s.ExpertMACs = 3 * int64(c.MoEIntermediate) * int64(c.LatentDim)
	s.LMHeadMACs = int64(c.Vocab) * int64(c.Hidden)
	for l := 0; l < p.experts.Layers(); l++ {
		if p.experts.Experts(l) > 0 {
			s.ExpertsPerTok += int64(p.Cfg.TopK)
		}
	}
	return s
}

// FloorBudget returns the smallest budget PlanMemory accepts for req
// (req.Budget is ignored), and FullBudget the smallest that keeps every
// weight resident (trunk pinned, every expert cached).
func (p *Plan) FloorBudget(req BudgetRequest) int64 {
	lo, hi := int64(1), int64(1)<<50
	for lo < hi {
		mid := lo + (hi-lo)/2
		req.Budget = mid
		if _, err := p.PlanMemory(req); err == nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// FullBudget returns the budget at which everything is resident.
func (p *Plan) FullBudget(req BudgetRequest) int64 {
	req.Budget = 0
	mp, err := p.PlanMemory(req)
	if err != nil {
		return 0
	}
	// PlanMemory's unlimited plan already counts every expert in the cache.
	return mp.Total()
}

// stagingBytes is the size of a staging buffer for a compressed packed
// trunk (a few chunks of blocks of the part with the largest chunks, see
// compress.go), 0 when the trunk is not compressed.
func (p *Plan) stagingBytes() int64 {
	var n int64
	for u := range p.parts {
		if cp := p.parts[u].comp; cp != nil {
			n = max(n, stageSlots*chunkSlotBytes(cp))
		}
	}
	return n
}
