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

	// What the process holds besides the engine's own buffers, so that a
	// budget bounds the peak resident set of the whole process:
	//
	// Threads is the number of kernel threads and IOQueueDepth
	// the reads in flight (zero: 8); each may hold an OS thread and its
	// stacks.
	Threads, IOQueueDepth int
	// Executable is what the running program's own file and zero-filled
	// data can make resident (rss.ExecutableBytes).
	Executable int64
	// Tokenizer is the heap the tokenizer's tables take (k3 estimates it
	// from the size of the tokenizer's files).
	Tokenizer int64
}

// MemoryPlan says where every byte of the budget goes. The plan decides
// only where bytes live and when they are read, never the arithmetic: the
// output is identical under every plan.
type MemoryPlan struct {
	Budget int64 // 0 = unlimited

	// Fixed floor. State and KV are for Sessions sessions; Scratch is one
	// pass of Rows rows. Overhead is the sum of the process's costs
	// outside the weights and state: Index (the checkpoint's tensor index
	// and the plan), Tokenizer, SessionVocab (each session's logits and
	// sampler buffers), Runtime (the Go runtime, thread stacks and the
	// garbage collector's headroom) and Executable (the program's own
	// pages).
	LMHead, Embed, Vectors, State, KV, Scratch, Overhead int64
	Index, Tokenizer, SessionVocab, Runtime, Executable  int64
	EmbedResident                                        bool
	Sessions, Rows                                       int

	// Trunk: pinned parts stay resident; the rest stream through a ring,
	// one arena of RingSlots × RingSlotBytes bytes (the planner makes one
	// "slot" of at least the largest streamed part, up to room for the two
	// consecutive streamed parts that need the most; see Trunk).
	// PinnedBytes counts the pinned parts' buffers as mapped (BufferBytes
	// of each).
	Pinned        []bool // by unit(layer, part)
	PinnedBytes   int64
	PinnedLayers  int // layers with both parts pinned
	RingSlots     int
	RingSlotBytes int64

	// Expert cache.
	CacheSlots     int
	CacheSlotBytes int64

	// TrunkBytesPerPass is what one forward pass reads of the trunk.
	TrunkBytesPerPass int64
}

// Total returns the planned bytes: the peak resident set the process may
// reach.
func (p *MemoryPlan) Total() int64 { return p.OffHeap() + p.Heap() + p.Executable }

// OffHeap returns the bytes of the engine's buffers mapped outside the Go
// heap (pinned trunk parts, the ring, the expert cache's arena), each as
// mapped (BufferBytes). A compressed part decodes in place, in a buffer a
// little larger than its image (partPlan.room), so it needs no staging.
func (p *MemoryPlan) OffHeap() int64 {
	return p.PinnedBytes + BufferBytes(int64(p.RingSlots)*p.RingSlotBytes) + BufferBytes(int64(p.CacheSlots)*p.CacheSlotBytes)
}

// Heap returns what the plan puts on the Go heap, runtime and collector's
// headroom included: everything but the off-heap buffers and the
// executable.
func (p *MemoryPlan) Heap() int64 {
	t := p.LMHead + p.Vectors + p.State + p.KV + p.Scratch + p.Overhead - p.Executable
	if p.EmbedResident {
		t += p.Embed
	}
	return t
}

// HeapLimit returns the limit for the Go runtime's memory
// (runtime/debug.SetMemoryLimit) that keeps the process within the
// budget: the budget less the off-heap buffers and the executable. It is
// at least Heap; zero without a budget.
func (p *MemoryPlan) HeapLimit() int64 {
	if p.Budget <= 0 {
		return 0
	}
	return p.Budget - p.OffHeap() - p.Executable
}

// HugeBufferMin is the smallest engine buffer that gets transparent huge
// pages (the engine asks for them from this size on). A huge-page buffer
// is mapped in whole 2 MiB pages; at this size the rounding costs at most
// 3%, and BufferBytes counts it.
const HugeBufferMin = 64 << 20

// hugePage is the size of a transparent huge page on amd64 and arm64.
const hugePage = 2 << 20

// BufferBytes returns the resident bytes of an engine buffer of n bytes:
// n rounded up to the page, or to the 2 MiB huge page from HugeBufferMin on
// (the buffers are pre-faulted, so every mapped byte is resident).
func BufferBytes(n int64) int64 {
	if n <= 0 {
		return 0
	}
	if n >= HugeBufferMin {
		return (n + hugePage - 1) &^ (hugePage - 1)
	}
	return iox.AlignUp(n)
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
	fmt.Fprintf(&b, "  %d sessions: state %s, KV cache %s; scratch %s for %d rows per pass\n",
		p.Sessions, gb(p.State), gb(p.KV), gb(p.Scratch), p.Rows)
	fmt.Fprintf(&b, "  process: tensor index %s, tokenizer %s, logits and samplers %s, Go runtime and GC headroom %s, executable %s (Go memory limit %s)\n",
		gb(p.Index), gb(p.Tokenizer), gb(p.SessionVocab), gb(p.Runtime), gb(p.Executable), gb(p.HeapLimit()))
	n := 0
	for _, x := range p.Pinned {
		if x {
			n++
		}
	}
	fmt.Fprintf(&b, "  trunk: %d of %d parts pinned (%d whole layers, %s); ring %d × %s; %s read per pass\n",
		n, len(p.Pinned), p.PinnedLayers, gb(p.PinnedBytes), p.RingSlots, gb(p.RingSlotBytes), gb(p.TrunkBytesPerPass))
	fmt.Fprintf(&b, "  expert cache: %d slots × %s = %s", p.CacheSlots, gb(p.CacheSlotBytes), gb(int64(p.CacheSlots)*p.CacheSlotBytes))
	return b.String()
}

// Floors and overheads the planner adds to what it can count exactly. Each
// is an upper bound of a measured value (TestPlanCoversHeap and the
// subprocess test TestPeakRSSWithinBudget check them).
const (
	// runtimeFixed is the Go runtime's own memory with an empty heap
	// (measured: 4.5 MB for a small program), the command's and the
	// engine's small allocations, the vDSO.
	runtimeFixed = 8 << 20
	// perThread is what one thread may hold: a worker's goroutine stack
	// (8 KB, grown by the frames of a kernel), an OS thread's system and
	// signal stacks (16 and 32 KB). At least minThreads are counted, so
	// that the floor is the same at every thread count up to it.
	perThread  = 128 << 10
	minThreads = 32
	// gcHeadroom is the room the garbage collector needs above the live
	// heap to collect Open's garbage without running continuously, plus
	// gcHeadroomShift: a 1/32 share of the planned heap (the runtime's
	// per-arena metadata and size-class rounding).
	gcHeadroom      = 8 << 20
	gcHeadroomShift = 5
	// perTensorOverhead is the checkpoint index's and the plan's memory
	// per tensor (measured: 438 B on the released shape's 497,052 tensors).
	perTensorOverhead = 512
	// perSessionVocabBytes is what a session holds per vocabulary entry
	// outside its state: its logits (4 bytes) and its sampler's logits,
	// order and probabilities (4 + 4 + 8).
	perSessionVocabBytes = 20
)

// PlanMemory splits the budget: the fixed floor first (lm_head, vectors,
// per-session state and scratch, the smallest expert cache that works,
// K+1 slots), then the trunk (pinned parts, largest first, as many as fit
// beside a ring of the largest part left; then the ring grows, with what
// is left, towards room for two consecutive streamed parts, so that reads
// overlap compute), then whatever is left to the expert cache. It fails with ErrBudget if the
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
	mp.Index = int64(p.Ckpt.Len()) * perTensorOverhead
	mp.Tokenizer = req.Tokenizer
	mp.SessionVocab = s * perSessionVocabBytes * int64(c.Vocab)
	mp.Executable = req.Executable
	// The lm_head is read into a heap buffer with room for the direct
	// read's alignment on both sides.
	mp.LMHead += 2 * iox.Align
	threads := max(req.Threads, minThreads) + max(req.IOQueueDepth, 8) + 4
	heap := mp.LMHead + mp.Vectors + mp.State + mp.KV + mp.Scratch + mp.Index + mp.Tokenizer + mp.SessionVocab
	mp.Runtime = runtimeFixed + int64(threads)*perThread + gcHeadroom + heap>>gcHeadroomShift
	mp.Overhead = mp.Index + mp.Tokenizer + mp.SessionVocab + mp.Runtime + mp.Executable
	mp.CacheSlotBytes = iox.AlignUp(p.experts.SlotBytes())
	minCache := BufferBytes(int64(c.TopK+1) * mp.CacheSlotBytes)

	var trunk int64
	for u := range p.parts {
		trunk += BufferBytes(p.parts[u].room())
	}
	totalExperts := p.experts.Count()
	if req.Budget == 0 {
		// Unlimited: everything resident.
		mp.EmbedResident = true
		for u := range mp.Pinned {
			mp.Pinned[u] = true
		}
		mp.PinnedBytes, mp.PinnedLayers = trunk, c.Layers
		mp.CacheSlots = int(totalExperts)
		return mp, nil
	}
	base := mp.LMHead + mp.Vectors + mp.State + mp.KV + mp.Scratch + mp.Overhead + minCache

	// Parts by size, largest first.
	order := make([]int, len(p.parts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p.parts[order[a]].room() > p.parts[order[b]].room() })
	// Pin the k largest parts, with a ring of at least the largest part
	// left, grown with what the budget has left towards room for every two
	// consecutive streamed parts (the ring is one arena, Trunk: the next
	// part is read while the current one computes where both fit). Of the
	// k that fit, take the one whose pass costs least (passCost): a pinned
	// byte is a byte not read per token, a ring too small for a pair makes
	// the first part's compute wait for the disk.
	fits := func(k int) (int64, bool) {
		var pinned int64
		for _, u := range order[:k] {
			pinned += BufferBytes(p.parts[u].room())
		}
		var ring int64
		if k < len(order) {
			ring = BufferBytes(iox.AlignUp(p.parts[order[k]].room()))
		}
		need := base + pinned + ring
		return need, need <= req.Budget
	}
	chosenK, bestCost := -1, 0.0
	pin := make([]bool, len(p.parts))
	for k := len(order); k >= 0; k-- {
		need, ok := fits(k)
		if !ok {
			continue
		}
		if k == len(order) {
			chosenK = k // everything pinned: nothing to read
			break
		}
		clear(pin)
		for _, u := range order[:k] {
			pin[u] = true
		}
		slot := iox.AlignUp(p.parts[order[k]].room())
		cost := p.passCost(pin, p.ringFor(pin, slot, req.Budget-(need-BufferBytes(slot))))
		if chosenK < 0 || cost < bestCost {
			chosenK, bestCost = k, cost
		}
	}
	if chosenK < 0 {
		need, _ := fits(0)
		return nil, fmt.Errorf("%w: the floor needs %s (lm_head %s, vectors %s, state %s, KV cache %s for %d positions × %d sessions, scratch %s, %d expert slots %s, one ring slot %s; the process %s: executable %s, Go runtime and GC headroom %s, tensor index %s, tokenizer %s, logits %s); the budget is %s",
			ErrBudget, Human(need), Human(mp.LMHead), Human(mp.Vectors), Human(mp.State), Human(mp.KV), req.MaxContext, req.Sessions,
			Human(mp.Scratch), c.TopK+1, Human(minCache), Human(BufferBytes(p.parts[order[0]].room())),
			Human(mp.Overhead), Human(mp.Executable), Human(mp.Runtime), Human(mp.Index), Human(mp.Tokenizer), Human(mp.SessionVocab), Human(req.Budget))
	}
	need, _ := fits(chosenK)
	for _, u := range order[:chosenK] {
		mp.Pinned[u] = true
		mp.PinnedBytes += BufferBytes(p.parts[u].room())
	}
	if chosenK < len(order) {
		slot := iox.AlignUp(p.parts[order[chosenK]].room())
		ring := p.ringFor(mp.Pinned, slot, req.Budget-(need-BufferBytes(slot)))
		need += BufferBytes(ring) - BufferBytes(slot)
		mp.RingSlots, mp.RingSlotBytes = 1, ring
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
	// The arena is one buffer: the slots that fit once it is rounded.
	left := req.Budget - (need - minCache)
	mp.CacheSlots = c.TopK + 1
	if slot := max(mp.CacheSlotBytes, 1); left > 0 {
		n := int(min(left/slot, totalExperts))
		for n > mp.CacheSlots && BufferBytes(int64(n)*slot) > left {
			n--
		}
		mp.CacheSlots = max(n, mp.CacheSlots)
	}
	if int64(mp.CacheSlots) >= totalExperts {
		mp.CacheSlots = int(max(totalExperts, int64(c.TopK+1)))
		// Resident embeddings add to the heap and to the collector's share.
		if mp.Total()+mp.Embed+mp.Embed>>gcHeadroomShift <= req.Budget {
			mp.EmbedResident = true
			mp.Runtime += mp.Embed >> gcHeadroomShift
			mp.Overhead += mp.Embed >> gcHeadroomShift
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
		s.TrunkBuffers += p.parts[u].room()
		s.LargestPart = max(s.LargestPart, p.parts[u].room())
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

// serialComputeShare estimates the compute of a trunk part for one token
// as a fraction of the time to read it: its matrices are read once from
// memory, several times faster than from disk (medium on the 2-vCPU
// development machine: 0.4 s of compute against 2.5 s of reads per token;
// many cores and a fast NVMe keep the fraction about the same).
const serialComputeShare = 0.15

// passCost estimates, in bytes read, one pass's time over the trunk with
// these parts pinned and a ring of ring bytes: every streamed part's
// bytes, plus the compute of each streamed part whose next streamed part
// does not fit beside it in the ring (it cannot be read meanwhile).
func (p *Plan) passCost(pinned []bool, ring int64) float64 {
	var streamed []int
	for u := range p.parts {
		if !pinned[u] {
			streamed = append(streamed, u)
		}
	}
	var cost float64
	for i, u := range streamed {
		pp := &p.parts[u]
		if cp := pp.comp; cp != nil {
			cost += float64(cp.stored)
		} else {
			cost += float64(pp.payload)
		}
		v := streamed[(i+1)%len(streamed)]
		if len(streamed) == 1 || iox.AlignUp(pp.room())+iox.AlignUp(p.parts[v].room()) > ring {
			cost += serialComputeShare * float64(pp.payload)
		}
	}
	return cost
}

// ringFor sizes the streaming ring: room for the two consecutive streamed
// parts (in pass order) that need the most, at least slot (the largest
// streamed part), at most what avail bytes hold once mapped.
func (p *Plan) ringFor(pinned []bool, slot, avail int64) int64 {
	var streamed []int
	for u := range p.parts {
		if !pinned[u] {
			streamed = append(streamed, u)
		}
	}
	want := slot
	if len(streamed) > 1 {
		for i, u := range streamed {
			v := streamed[(i+1)%len(streamed)]
			want = max(want, iox.AlignUp(p.parts[u].room())+iox.AlignUp(p.parts[v].room()))
		}
	}
	if BufferBytes(want) <= avail {
		return want
	}
	// As much as avail holds: whole huge pages for a large ring.
	ring := iox.AlignDown(avail)
	if ring >= HugeBufferMin {
		ring &^= hugePage - 1
	}
	return max(slot, ring)
}

// compressed reports whether any part is read from a compressed pack.
func (p *Plan) compressed() bool {
	for u := range p.parts {
		if p.parts[u].comp != nil {
			return true
		}
	}
	return false
}
