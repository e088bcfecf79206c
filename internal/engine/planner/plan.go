// Package planner decides where every byte of a RAM budget goes, and what
// a pass then costs: which dense trunk parts stay pinned, how large the
// streaming ring is, how many routed experts the cache holds, how much
// state and scratch the sessions and passes need, and the Go runtime's
// share (with the process-wide memory limit that keeps the heap inside
// it). Plan is the one function that answers "what fits, and what does it
// cost"; Floor and Full are the budgets at its two ends.
//
// The planner decides only where bytes live and when they are read, never
// the arithmetic: the output is identical under every plan. It reads no
// weights: it works from a Weights summary (model sizes and the trunk's
// part layout), so it plans a header-only checkpoint as well as a real
// one.
package planner

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// ErrBudget reports a RAM budget that cannot hold the model's fixed floor.
var ErrBudget = errors.New("RAM budget too small")

// Part is what the planner knows of one dense trunk part (a model.Unit):
// Room is the buffer it is loaded into (its image, or for a part decoded
// in place from a compressed pack a little more), Read the bytes one load
// reads from disk, Payload its matrix bytes (a proxy for its compute).
type Part struct {
	Room, Read, Payload int64
}

// Weights summarise a checkpoint for planning: the model's sizes and the
// trunk's parts, in model.Unit order.
type Weights struct {
	Cfg   *model.Config
	Sizes model.WeightSizes
	Parts []Part
}

// Request is what the memory planner needs to know about the run.
type Request struct {
	// Budget is the hard limit in bytes; zero means unlimited (everything
	// resident).
	Budget int64
	// Sessions is the number of sequences that may hold state at once.
	Sessions int
	// MaxContext is the positions each session may hold.
	MaxContext int
	// Chunk is the most prompt tokens of one sequence per pass, and
	// MaxBatch the most token rows of one pass summed over its sequences:
	// the scratch of a pass is sized for MaxBatch rows (Chunk when
	// MaxBatch is zero) and counted once, not per session. Both zero: the
	// planner chooses the rows (Rows), as many as the budget affords.
	Chunk    int
	MaxBatch int
	// Speculate is the most drafted tokens per speculative pass. SpecSlots
	// sequences may speculate in one pass (zero: every session), each with
	// a rollback buffer: a copy of its KDA state and a record of its rows.
	Speculate, SpecSlots int
	// SpecAuto makes speculation optional: a budget too small for it gets
	// a plan without it (and Floor is the floor without it).
	SpecAuto bool
	// Drafter is the heap the drafter's tables take (every session's
	// matcher over its tokens and the process's index of recent outputs),
	// counted with speculation.
	Drafter int64
	// PrefixRAM is the prefix cache's RAM tier: these bytes (counted in
	// the floor), or with PrefixRAMAuto a share of the budget above the
	// floor (an eighth; none without a budget, where nothing limits it).
	PrefixRAM     int64
	PrefixRAMAuto bool

	// Ranks is the size of the cluster this process is a rank of (0 or
	// 1: one process), Worker whether it is a rank other than 0: the
	// weights are then its slice (model.Plan.Shard), rank 0 holds a
	// cluster pass's buffers besides its scratch, and another rank holds
	// no sequence's state but its KDA heads of Sessions' states, no
	// scratch and no embeddings, only the buffers of the rounds it serves.
	Ranks  int
	Worker bool

	// keepEmbed plans the embeddings resident from the start (a wider
	// plan of a Residency whose resting plan keeps them so).
	keepEmbed bool
	// clusterRows and clusterTile, when set, are the widest pass of a
	// Residency on rank 0 of a cluster: every plan counts its cluster
	// buffers (the workers' replies, the expert chunk), which the Go heap
	// keeps once a wide pass has grown them.
	clusterRows, clusterTile int

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

	// Fixed floor. State and KV are for Sessions sessions. A pass of Rows
	// rows computed in tiles of Tile rows has its buffers in one off-heap
	// block of ScratchArena bytes (model.NewScratchIn) and allocates
	// Scratch bytes of heap beside them; AutoRows says the planner chose
	// Rows: the resting plan's Rows serve decoding, and prompts waiting
	// may move the engine to a wider plan (Residency). Overhead is the sum of the process's costs
	// outside the weights and state: Index (the checkpoint's tensor index
	// and the plan), Tokenizer, SessionVocab (each session's logits and
	// sampler buffers), Runtime (the Go runtime, thread stacks and the
	// garbage collector's headroom) and Executable (the program's own
	// pages).
	LMHead, Embed, Vectors, State, KV, Scratch, Overhead int64
	ScratchArena                                         int64
	Index, Tokenizer, SessionVocab, Runtime, Executable  int64
	// Speculation: SpecSlots rollback buffers of SpecRows rows (Spec bytes
	// in all, on the heap) and the drafter's tables (Drafter, in
	// Overhead).
	Spec, Drafter        int64
	SpecSlots, SpecRows  int
	EmbedResident        bool
	Sessions, Rows, Tile int
	AutoRows             bool

	// Trunk: pinned parts stay resident; the rest stream through a ring,
	// one arena of RingSlots × RingSlotBytes bytes (the planner makes one
	// "slot" of at least the largest streamed part, up to room for the two
	// consecutive streamed parts that need the most; see Trunk).
	// PinnedBytes counts the pinned parts' buffers as mapped (BufferBytes
	// of each).
	Pinned        []bool // by model.Unit(layer, part)
	PinnedBytes   int64
	PinnedLayers  int // layers with both parts pinned
	RingSlots     int
	RingSlotBytes int64

	// Expert cache.
	CacheSlots     int
	CacheSlotBytes int64

	// PrefixRAM is the prefix cache's RAM tier (off-heap buffers).
	PrefixRAM int64

	// TrunkBytesPerPass is what one forward pass reads of the trunk.
	TrunkBytesPerPass int64
}

// Total returns the planned bytes: the peak resident set the process may
// reach.
func (p *MemoryPlan) Total() int64 { return p.OffHeap() + p.Heap() + p.Executable }

// OffHeap returns the bytes of the engine's buffers mapped outside the Go
// heap (pinned trunk parts, the ring, the expert cache's arena, a pass's
// scratch), each as mapped (BufferBytes). A compressed part decodes in
// place, in a buffer a little larger than its image (Part.Room), so it
// needs no staging.
func (p *MemoryPlan) OffHeap() int64 {
	return p.PinnedBytes + BufferBytes(int64(p.RingSlots)*p.RingSlotBytes) + BufferBytes(int64(p.CacheSlots)*p.CacheSlotBytes) +
		BufferBytes(p.ScratchArena) + p.PrefixRAM
}

// Heap returns what the plan puts on the Go heap, runtime and collector's
// headroom included: everything but the off-heap buffers and the
// executable.
func (p *MemoryPlan) Heap() int64 {
	t := p.LMHead + p.Vectors + p.State + p.Spec + p.KV + p.Scratch + p.Overhead - p.Executable
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
	fmt.Fprintf(&b, "  %d sessions: state %s, KV cache %s; scratch %s for %d rows per pass in tiles of %d\n",
		p.Sessions, gb(p.State), gb(p.KV), gb(BufferBytes(p.ScratchArena)+p.Scratch), p.Rows, p.Tile)
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
	if p.PrefixRAM > 0 {
		fmt.Fprintf(&b, "\n  prefix cache RAM tier %s", gb(p.PrefixRAM))
	}
	if p.SpecSlots > 0 {
		fmt.Fprintf(&b, "\n  speculation: %d rollback buffers of %d rows %s, drafter tables %s", p.SpecSlots, p.SpecRows, gb(p.Spec), gb(p.Drafter))
	}
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

// The rows of a pass when the planner chooses them (Request.Chunk and
// MaxBatch zero). A pass reads the streamed trunk and the union of the
// experts its rows chose, so a prompt costs those bytes divided by the
// rows of its passes: wide passes are what makes a long prompt cheap. But
// memory held for a wide pass while none runs is taken from the pinned
// trunk and the expert cache, which every decoded token would have used.
// So the resting plan (Plan) sizes its passes for decoding, DecodeRows
// (more with many sessions or drafted rows, at most MinAutoRows), and
// spends the rest of the budget on weights; the floor still holds a pass
// of MinAutoRows, and Residency adds the plans of wider passes that the
// engine moves to while prompts wait, when their bytes pay for the move
// (Residency.Choose). Without a budget, MaxAutoRowsResident.
const (
	DecodeRows          = 64
	MinAutoRows         = 256
	MaxAutoRowsResident = 1024
	autoPrefixShare     = 8 // the prefix cache's RAM tier, when left to the planner
)

// Plan splits the budget: the fixed floor first (lm_head, vectors,
// per-session state and scratch, the smallest expert cache that works,
// K+1 slots), then the trunk (pinned parts, largest first, as many as fit
// beside a ring of the largest part left; then the ring grows, with what
// is left, towards room for two consecutive streamed parts, so that reads
// overlap compute), then whatever is left to the expert cache. It fails
// with ErrBudget if the floor does not fit, naming what is needed. The rows
// of a pass are the request's, or with a budget the resting rows
// (DecodeRows, see MinAutoRows) while the floor is that of a pass of
// MinAutoRows.
func Plan(w *Weights, req Request) (*MemoryPlan, error) {
	mp, err := plan(w, req)
	if err != nil && req.SpecAuto && req.Speculate > 0 && errors.Is(err, ErrBudget) {
		req.Speculate, req.SpecSlots, req.Drafter = 0, 0, 0
		return plan(w, req)
	}
	return mp, err
}

func plan(w *Weights, req Request) (*MemoryPlan, error) {
	req = req.resolved()
	limit := req.rowLimit()
	switch {
	case req.MaxBatch > 0:
		return planRows(w, req, min(req.MaxBatch, limit), false)
	case req.Budget <= 0:
		return planRows(w, req, min(MaxAutoRowsResident, limit), true)
	}
	// The floor is the plan of the narrowest wide pass: it must fit, and
	// names what does not.
	wide := min(MinAutoRows, limit)
	if _, err := planRows(w, req, wide, true); err != nil {
		return nil, err
	}
	if req.PrefixRAMAuto {
		// A share of what the budget has above its floor.
		r := req
		r.PrefixRAM = iox.AlignDown((req.Budget - floorRows(w, req, wide)) / autoPrefixShare)
		if _, err := planRows(w, r, wide, true); err == nil {
			req = r
		}
	}
	return planRows(w, req, restRows(req, limit), true)
}

// restRows is the rows of the resting plan's passes: every session's
// decode row and drafted rows in one pass, at least DecodeRows (a short
// prompt in one pass), at most MinAutoRows, at most limit.
func restRows(req Request, limit int) int {
	return min(limit, max(DecodeRows, min(MinAutoRows, req.Sessions*(1+max(req.Speculate, 0)))))
}

// resolved fills the request's defaults: one session; MaxBatch is Chunk
// when only Chunk is given.
func (req Request) resolved() Request {
	if req.Sessions <= 0 {
		req.Sessions = 1
	}
	if req.MaxBatch <= 0 && req.Chunk > 0 {
		req.MaxBatch = req.Chunk
	}
	return req
}

// rowLimit is the most rows a pass can carry: every position the sessions
// hold (a pass never carries more than they can feed).
func (req Request) rowLimit() int { return max(req.Sessions*req.MaxContext, 1) }

// floorRows is the smallest budget planRows accepts with rows rows.
func floorRows(w *Weights, req Request, rows int) int64 {
	lo, hi := int64(1), int64(1)<<50
	for lo < hi {
		mid := lo + (hi-lo)/2
		req.Budget = mid
		if _, err := planRows(w, req, rows, true); err == nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// planRows is Plan with the rows of a pass given.
func planRows(w *Weights, req Request, rows int, auto bool) (*MemoryPlan, error) {
	c := w.Cfg
	parts := w.Parts
	mp := &MemoryPlan{Budget: req.Budget, Pinned: make([]bool, len(parts)), Sessions: req.Sessions,
		Rows: rows, Tile: min(model.DefaultTile, rows), AutoRows: auto}
	mp.PrefixRAM = max(req.PrefixRAM, 0)
	mp.LMHead = w.Sizes.LMHead
	mp.Embed = w.Sizes.Embed
	mp.Vectors = w.Sizes.Vectors
	fixed, perPos := model.StateBytes(c)
	s := int64(req.Sessions)
	mp.State = s * fixed
	if req.Speculate > 0 {
		slots := req.SpecSlots
		if slots <= 0 || slots > req.Sessions {
			slots = req.Sessions
		}
		mp.SpecSlots, mp.SpecRows = slots, req.Speculate+1
		mp.Spec = int64(slots) * (fixed + model.SpecRecordBytes(c, req.Speculate+1))
		mp.Drafter = max(req.Drafter, 0)
	}
	mp.KV = s * perPos * int64(req.MaxContext)
	// Every plan of a budget counts the heap of tiles as wide as its widest
	// plan's, so that all of them share one Go heap (Residency moves
	// between them without touching it).
	mp.Scratch = model.ScratchHeapBytes(c, min(model.DefaultTile, req.rowLimit()), req.MaxContext)
	mp.ScratchArena = model.ScratchArenaBytes(c, mp.Rows, mp.Tile)
	switch {
	case req.Worker:
		// Rounds of rank 0's passes, of its widest rows; its KDA heads
		// of every session's state.
		mp.State, mp.KV, mp.Embed = s*model.HeadStateBytes(c, req.Ranks), 0, 0
		mp.Spec, mp.Drafter, mp.SpecSlots, mp.SpecRows = 0, 0, 0, 0
		if req.Speculate > 0 {
			// Each sequence that speculates keeps the copy and record of
			// its heads (model.HeadStore) until it is forgotten.
			mp.SpecSlots, mp.SpecRows = req.Sessions, req.Speculate+1
			mp.Spec = s * model.HeadSpecBytes(c, req.Ranks, req.Speculate+1)
		}
		mp.ScratchArena = 0
		mp.Scratch = model.WorkerBufferBytes(c, MaxAutoRowsResident*4, model.DefaultTile)
	case req.Ranks > 1:
		rows, tile := mp.Rows, mp.Tile
		if req.clusterRows > rows {
			rows, tile = req.clusterRows, req.clusterTile
		}
		mp.Scratch += model.ClusterScratchBytes(c, rows, tile)
		// Rank 0 holds its own KDA heads of each state (model.Model.NewState).
		mp.State = s * model.HeadStateBytes(c, req.Ranks)
		if mp.SpecSlots > 0 {
			// Rank 0 copies and records only its own KDA heads.
			mp.Spec = int64(mp.SpecSlots) * model.HeadSpecBytes(c, req.Ranks, mp.SpecRows)
		}
	}
	mp.Index = int64(w.Sizes.Tensors) * perTensorOverhead
	mp.Tokenizer = req.Tokenizer
	mp.SessionVocab = s * perSessionVocabBytes * int64(c.Vocab)
	if req.Worker {
		mp.SessionVocab = 0
	}
	mp.Executable = req.Executable
	// The lm_head is read into a heap buffer with room for the direct
	// read's alignment on both sides.
	mp.LMHead += 2 * iox.Align
	threads := max(req.Threads, minThreads) + max(req.IOQueueDepth, 8) + 4
	heap := mp.LMHead + mp.Vectors + mp.State + mp.Spec + mp.KV + mp.Scratch + mp.Index + mp.Tokenizer + mp.SessionVocab + mp.Drafter
	mp.Runtime = runtimeFixed + int64(threads)*perThread + gcHeadroom + heap>>gcHeadroomShift
	mp.Overhead = mp.Index + mp.Tokenizer + mp.SessionVocab + mp.Drafter + mp.Runtime + mp.Executable
	var embed int64
	if req.keepEmbed && req.Budget > 0 {
		// Resident embeddings add to the heap and to the collector's share.
		mp.EmbedResident = true
		mp.Runtime += mp.Embed >> gcHeadroomShift
		mp.Overhead += mp.Embed >> gcHeadroomShift
		embed = mp.Embed
	}
	mp.CacheSlotBytes = iox.AlignUp(w.Sizes.ExpertSlot)
	minCache := BufferBytes(int64(c.TopK+1) * mp.CacheSlotBytes)

	var trunk int64
	for _, pt := range parts {
		trunk += BufferBytes(pt.Room)
	}
	totalExperts := w.Sizes.Experts
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
	base := mp.LMHead + mp.Vectors + mp.State + mp.Spec + mp.KV + mp.Scratch + BufferBytes(mp.ScratchArena) + mp.Overhead + minCache + mp.PrefixRAM + embed

	// Parts by size, largest first.
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return parts[order[a]].Room > parts[order[b]].Room })
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
			pinned += BufferBytes(parts[u].Room)
		}
		var ring int64
		if k < len(order) {
			ring = BufferBytes(iox.AlignUp(parts[order[k]].Room))
		}
		need := base + pinned + ring
		return need, need <= req.Budget
	}
	chosenK, bestCost := -1, 0.0
	pin := make([]bool, len(parts))
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
		slot := iox.AlignUp(parts[order[k]].Room)
		cost := passCost(parts, pin, ringFor(parts, pin, slot, req.Budget-(need-BufferBytes(slot))))
		if chosenK < 0 || cost < bestCost {
			chosenK, bestCost = k, cost
		}
	}
	if chosenK < 0 {
		need, _ := fits(0)
		return nil, fmt.Errorf("%w: the floor needs %s (lm_head %s, vectors %s, state %s, speculation %s, KV cache %s for %d positions × %d sessions, scratch %s for %d rows, %d expert slots %s, one ring slot %s; the process %s: executable %s, Go runtime and GC headroom %s, tensor index %s, tokenizer %s, logits %s); the budget is %s",
			ErrBudget, Human(need), Human(mp.LMHead), Human(mp.Vectors), Human(mp.State), Human(mp.Spec+mp.Drafter), Human(mp.KV), req.MaxContext, req.Sessions,
			Human(mp.Scratch+BufferBytes(mp.ScratchArena)), mp.Rows, c.TopK+1, Human(minCache), Human(BufferBytes(parts[order[0]].Room)),
			Human(mp.Overhead), Human(mp.Executable), Human(mp.Runtime), Human(mp.Index), Human(mp.Tokenizer), Human(mp.SessionVocab), Human(req.Budget))
	}
	need, _ := fits(chosenK)
	for _, u := range order[:chosenK] {
		mp.Pinned[u] = true
		mp.PinnedBytes += BufferBytes(parts[u].Room)
	}
	if chosenK < len(order) {
		slot := iox.AlignUp(parts[order[chosenK]].Room)
		ring := ringFor(parts, mp.Pinned, slot, req.Budget-(need-BufferBytes(slot)))
		need += BufferBytes(ring) - BufferBytes(slot)
		mp.RingSlots, mp.RingSlotBytes = 1, ring
	}
	for l := 0; l < c.Layers; l++ {
		if mp.Pinned[model.Unit(l, model.PartAttn)] && mp.Pinned[model.Unit(l, model.PartFFN)] {
			mp.PinnedLayers++
		}
	}
	for u, pt := range parts {
		if !mp.Pinned[u] {
			mp.TrunkBytesPerPass += pt.Read
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
		if !mp.EmbedResident && mp.Total()+mp.Embed+mp.Embed>>gcHeadroomShift <= req.Budget {
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

// Sizes are a checkpoint's weight sizes, in bytes, with the trunk's
// buffers as this layout loads them, and its work per token.
type Sizes struct {
	model.WeightSizes
	// TrunkBuffers is every trunk part's buffer (Part.Room summed),
	// LargestPart the largest (the smallest ring).
	TrunkBuffers, LargestPart int64
}

// SizesOf returns w's sizes.
func SizesOf(w *Weights) Sizes {
	s := Sizes{WeightSizes: w.Sizes}
	for _, pt := range w.Parts {
		s.TrunkBuffers += pt.Room
		s.LargestPart = max(s.LargestPart, pt.Room)
	}
	return s
}

// Floor returns the smallest budget Plan accepts for req (req.Budget is
// ignored), and Full the smallest that keeps every weight resident (trunk
// pinned, every expert cached).
func Floor(w *Weights, req Request) int64 {
	req = req.resolved()
	if req.SpecAuto {
		req.Speculate, req.SpecSlots, req.Drafter = 0, 0, 0
	}
	if req.MaxBatch > 0 {
		return floorRows(w, req, min(req.MaxBatch, req.rowLimit()))
	}
	return floorRows(w, req, min(MinAutoRows, req.rowLimit()))
}

// Full returns the budget at which everything is resident.
func Full(w *Weights, req Request) int64 {
	req.Budget = 0
	mp, err := Plan(w, req)
	if err != nil {
		return 0
	}
	// Plan's unlimited plan already counts every expert in the cache.
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
func passCost(parts []Part, pinned []bool, ring int64) float64 {
	var streamed []int
	for u := range parts {
		if !pinned[u] {
			streamed = append(streamed, u)
		}
	}
	var cost float64
	for i, u := range streamed {
		pt := parts[u]
		cost += float64(pt.Read)
		v := streamed[(i+1)%len(streamed)]
		if len(streamed) == 1 || iox.AlignUp(pt.Room)+iox.AlignUp(parts[v].Room) > ring {
			cost += serialComputeShare * float64(pt.Payload)
		}
	}
	return cost
}

// ringFor sizes the streaming ring: room for the two consecutive streamed
// parts (in pass order) that need the most, at least slot (the largest
// streamed part), at most what avail bytes hold once mapped.
func ringFor(parts []Part, pinned []bool, slot, avail int64) int64 {
	var streamed []int
	for u := range parts {
		if !pinned[u] {
			streamed = append(streamed, u)
		}
	}
	want := slot
	if len(streamed) > 1 {
		for i, u := range streamed {
			v := streamed[(i+1)%len(streamed)]
			want = max(want, iox.AlignUp(parts[u].Room)+iox.AlignUp(parts[v].Room))
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
