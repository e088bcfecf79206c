package k3

import (
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/model"
)

// MemoryPlan says where every byte of a RAM budget goes: the fixed floor,
// the pinned trunk, the streaming ring, the expert cache. Byte counts are
// resident bytes (buffers as mapped, alignment included).
type MemoryPlan struct {
	// Budget is the RAM budget planned for; 0 means unlimited.
	Budget int64
	// TotalBytes is the peak resident set the plan allows the process:
	// OffHeapBytes + HeapBytes + ExecutableBytes.
	TotalBytes int64
	// OffHeapBytes are the engine's buffers outside the Go heap: pinned
	// trunk parts, the streaming ring, the expert cache, a pass's scratch.
	OffHeapBytes int64
	// HeapBytes is what the plan puts on the Go heap, the runtime and the
	// collector's headroom included.
	HeapBytes int64
	// HeapLimitBytes is the Go runtime's memory limit Open sets
	// (runtime/debug.SetMemoryLimit): the budget less the off-heap buffers
	// and the executable, at least HeapBytes; 0 without a budget.
	HeapLimitBytes int64

	// The fixed floor. LMHeadBytes is the output head; EmbedBytes the
	// token embeddings, resident only if EmbedResident (otherwise read one
	// row per token); VectorBytes the norms and other small vectors.
	LMHeadBytes, EmbedBytes, VectorBytes int64
	EmbedResident                        bool
	// Sessions is the number of sessions the plan holds state for;
	// StateBytes is their KDA state and conv histories, KVBytes their MLA
	// caches.
	Sessions            int
	StateBytes, KVBytes int64
	// Speculative decoding (Options.Speculate): SpecSlots sequences may
	// speculate in one pass, each with a rollback buffer (a copy of its
	// recurrent state and a record of SpecRows rows; SpecBytes in all),
	// and DrafterBytes hold the drafter's tables (every session's index
	// of its tokens, the process's index of recent outputs).
	SpecSlots, SpecRows     int
	SpecBytes, DrafterBytes int64
	// Rows is the most token rows one pass carries; ScratchBytes one
	// pass's scratch for them. Under a budget this is the resting plan,
	// whose passes are sized for decoding: while prompts wait, the engine
	// may move to a plan of wider passes (Inspection.PlanWork).
	Rows         int
	ScratchBytes int64
	// The process outside the weights and state: the checkpoint's tensor
	// index and the plan, the tokenizer, each session's logits and sampler
	// buffers, the Go runtime (thread stacks, the collector's headroom),
	// the executable's own pages.
	IndexBytes, TokenizerBytes, SessionVocabBytes, RuntimeBytes, ExecutableBytes int64

	// The dense trunk: its layer parts (two per layer) are pinned
	// (resident) or streamed through a ring of RingSlots × RingSlotBytes
	// bytes (at least the largest streamed part; the next parts are read
	// into its free room while the current one computes). PinnedLayers
	// counts layers with both parts pinned.
	PinnedParts, StreamedParts, PinnedLayers int
	PinnedBytes                              int64
	RingSlots                                int
	RingSlotBytes                            int64
	// TrunkBytesPerPass is what one forward pass reads of the trunk.
	TrunkBytesPerPass int64

	// The routed-expert cache: CacheSlots experts of CacheSlotBytes each.
	CacheSlots     int
	CacheSlotBytes int64

	text string
}

// String describes the plan on a few lines, as Open logs it.
func (p *MemoryPlan) String() string { return p.text }

// newMemoryPlan copies the engine's plan into the public type.
func newMemoryPlan(mp *planner.MemoryPlan) *MemoryPlan {
	p := &MemoryPlan{
		Budget: mp.Budget, TotalBytes: mp.Total(), OffHeapBytes: mp.OffHeap(), HeapBytes: mp.Heap(), HeapLimitBytes: mp.HeapLimit(),
		LMHeadBytes: mp.LMHead, EmbedBytes: mp.Embed, VectorBytes: mp.Vectors, EmbedResident: mp.EmbedResident,
		Sessions: mp.Sessions, StateBytes: mp.State, KVBytes: mp.KV, Rows: mp.Rows, ScratchBytes: mp.Scratch + planner.BufferBytes(mp.ScratchArena),
		SpecSlots: mp.SpecSlots, SpecRows: mp.SpecRows, SpecBytes: mp.Spec, DrafterBytes: mp.Drafter,
		IndexBytes: mp.Index, TokenizerBytes: mp.Tokenizer, SessionVocabBytes: mp.SessionVocab, RuntimeBytes: mp.Runtime, ExecutableBytes: mp.Executable,
		PinnedLayers: mp.PinnedLayers, PinnedBytes: mp.PinnedBytes, RingSlots: mp.RingSlots, RingSlotBytes: mp.RingSlotBytes,
		TrunkBytesPerPass: mp.TrunkBytesPerPass,
		CacheSlots:        mp.CacheSlots, CacheSlotBytes: mp.CacheSlotBytes,
		text: mp.String(),
	}
	for _, pinned := range mp.Pinned {
		if pinned {
			p.PinnedParts++
		} else {
			p.StreamedParts++
		}
	}
	return p
}

// Sizes are a checkpoint's weight sizes, in bytes, and its work per token.
type Sizes struct {
	// TrunkPayload is the matrix bytes of every dense layer part,
	// TrunkBuffers the same parts' buffers with alignment; LargestPart the
	// largest part's buffer (the smallest ring).
	TrunkPayload, TrunkBuffers, LargestPart int64
	// ExpertBytes is one routed expert; Experts the routed experts in the
	// checkpoint; ExpertsPerTok those one token uses (top-k × MoE layers).
	ExpertBytes, Experts, ExpertsPerTok int64
	// LMHead and Embed are the output head and the token embeddings.
	LMHead, Embed int64
	// Multiply-adds per token: every trunk matrix once (TrunkMACs), one
	// routed expert (ExpertMACs), the output head (LMHeadMACs).
	TrunkMACs, ExpertMACs, LMHeadMACs int64
}

func newSizes(s planner.Sizes) Sizes {
	return Sizes{TrunkPayload: s.TrunkPayload, TrunkBuffers: s.TrunkBuffers, LargestPart: s.LargestPart,
		ExpertBytes: s.ExpertBytes, Experts: s.Experts, ExpertsPerTok: s.ExpertsPerTok, LMHead: s.LMHead, Embed: s.Embed,
		TrunkMACs: s.TrunkMACs, ExpertMACs: s.ExpertMACs, LMHeadMACs: s.LMHeadMACs}
}

// Config is the model's architecture, read from config.json: the numbers
// a user sizes work by. (The engine reads every key; these are the ones
// that mean something outside it.)
type Config struct {
	// Layers is the number of decoder layers (num_hidden_layers):
	// KDALayers of Kimi Delta Attention and MLALayers of multi-head latent
	// attention; DenseLayers of them (the first) have a dense FFN, the
	// MoELayers others a mixture of experts.
	Layers, KDALayers, MLALayers, DenseLayers, MoELayers int
	// Hidden is the hidden size (hidden_size); Vocab the vocabulary size
	// (vocab_size), the length of every logits row.
	Hidden, Vocab int
	// KDAHeads × KDAHeadDim is the width of a KDA layer's heads;
	// MLAHeads is the number of MLA attention heads.
	KDAHeads, KDAHeadDim, MLAHeads int
	// Experts is the number of routed experts per MoE layer
	// (num_experts), TopK those each token uses (num_experts_per_token),
	// SharedExperts those every token uses.
	Experts, TopK, SharedExperts int
	// LatentDim is the routed experts' input width
	// (routed_expert_hidden_size), MoEIntermediate their hidden width;
	// DenseIntermediate the dense FFN's (intermediate_size).
	LatentDim, MoEIntermediate, DenseIntermediate int
	// MaxPositions is the longest context the model was trained for
	// (max_position_embeddings), zero when config.json does not say; a
	// longer Options.MaxContext is refused.
	MaxPositions int
}

func newConfig(c *model.Config) Config {
	mla, dense := c.NumMLA(), min(c.FirstKDense, c.Layers)
	return Config{
		Layers: c.Layers, KDALayers: c.Layers - mla, MLALayers: mla, DenseLayers: dense, MoELayers: c.Layers - dense,
		Hidden: c.Hidden, Vocab: c.Vocab, KDAHeads: c.KDAHeads, KDAHeadDim: c.KDAHeadDim, MLAHeads: c.MLAHeads,
		Experts: c.Experts, TopK: c.TopK, SharedExperts: c.SharedExperts,
		LatentDim: c.LatentDim, MoEIntermediate: c.MoEIntermediate, DenseIntermediate: c.DenseIntermediate,
		MaxPositions: c.MaxPositions,
	}
}
