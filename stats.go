package k3

import (
	"time"
)

// Stats are cumulative counters of a Model since Open. Take two snapshots
// and subtract for a step's figures (Stats.Sub).
type Stats struct {
	// BudgetBytes is Options.RAMBudget (0: unlimited); PlannedBytes what
	// the memory plan uses of it.
	BudgetBytes, PlannedBytes int64
	// PinnedLayers is the number of layers whose dense weights are
	// resident; StreamedParts how many layer parts stream per pass.
	PinnedLayers, StreamedParts int

	// BytesRead is everything read from the checkpoint after Open (trunk,
	// experts, embedding rows), alignment padding included.
	BytesRead int64
	// TrunkBytesRead is the part of it that streamed dense layer parts;
	// ExpertBytesRead the routed experts the cache missed;
	// EmbedBytesRead the embedding rows read per token (when the table is
	// not resident). With ReloadedBytes (below), the rest of BytesRead is
	// the direct reads' alignment padding (and re-reads after short
	// reads).
	TrunkBytesRead  int64
	ExpertBytesRead int64
	EmbedBytesRead  int64
	// TrunkDecodedBytes are the bytes of streamed trunk parts decoded from
	// a compressed pack (Options.TrunkDir written with PackOptions.Compress;
	// TrunkBytesRead is then what the disk delivered), TrunkDecodeTime the
	// core time of those decodes summed over blocks: their ratio is the
	// decode rate per core.
	TrunkDecodedBytes int64
	TrunkDecodeTime   time.Duration

	// CacheHits and CacheMisses count routed-expert lookups in the expert
	// cache: a miss reads the expert from disk.
	CacheHits, CacheMisses int64

	// Passes counts forward passes over the weights, Rows the token rows
	// they carried (every sequence's new tokens, summed), so Rows/Passes
	// is the mean batch. ExpertUnion sums, over every MoE layer of every
	// pass, the distinct routed experts the pass needed; ExpertUnion over
	// MoELayerPasses is the mean union per MoE layer per pass.
	Passes, Rows                int64
	ExpertUnion, MoELayerPasses int64

	// SpecPasses counts speculative steps (one pass each), SpecRows their
	// rows (the pending token plus the drafts), SpecAccepted the drafts
	// accepted: each step emits SpecAccepted/SpecPasses + 1 tokens on
	// average.
	SpecPasses, SpecRows, SpecAccepted int64

	// IOTime is the wall time during which at least one read was in
	// flight; ComputeTime the time forward passes ran minus the time they
	// waited for weights; WaitTime that waiting; ForwardTime the passes'
	// wall time.
	IOTime, ComputeTime, WaitTime, ForwardTime time.Duration

	// PeakRSSBytes is the process's peak resident set size.
	PeakRSSBytes int64

	// The prefix cache (Options.PrefixCache): PrefixHits and PrefixMisses
	// count the prompts it was asked for (a hit restored a prefix),
	// PrefixTokens the tokens restored instead of computed, PrefixSaves
	// the states stored; PrefixEvictions the entries evicted to make room
	// (RAM and disk), PrefixBad the damaged or foreign entries removed;
	// PrefixRAMBytes and PrefixDiskBytes what each tier holds now;
	// PrefixRestoreTime and PrefixSaveTime the time spent restoring and
	// saving.
	PrefixHits, PrefixMisses, PrefixTokens  int64
	PrefixSaves, PrefixEvictions, PrefixBad int64
	PrefixRAMBytes, PrefixDiskBytes         int64
	PrefixRestoreTime, PrefixSaveTime       time.Duration

	// ConstrainedGenerations counts the generations with a constraint
	// (GenerateOptions.Constraint: JSON Schema, regular expression, a
	// chat's response format or forced tool call), MaskedTokens the tokens
	// they chose under its mask, MaskTime the time spent computing masks.
	ConstrainedGenerations, MaskedTokens int64
	MaskTime                             time.Duration

	// PlanMoves counts the moves between the memory plans of the budget:
	// to wider passes while prompts wait, and back to the resting plan,
	// whose memory holds weights for decoding. ReloadedBytes is what the
	// moves read to pin trunk parts again (in BytesRead, not in
	// TrunkBytesRead).
	PlanMoves, ReloadedBytes int64
}

// ReadGBps returns the achieved read bandwidth over IOTime, in GB/s.
func (s Stats) ReadGBps() float64 {
	if s.IOTime <= 0 {
		return 0
	}
	return float64(s.BytesRead) / s.IOTime.Seconds() / 1e9
}

// Sub returns the counters accumulated since an earlier snapshot prev; the
// configuration fields, the peak RSS and the prefix cache's tier sizes are
// kept from s.
func (s Stats) Sub(prev Stats) Stats {
	d := s
	d.BytesRead -= prev.BytesRead
	d.TrunkBytesRead -= prev.TrunkBytesRead
	d.ExpertBytesRead -= prev.ExpertBytesRead
	d.EmbedBytesRead -= prev.EmbedBytesRead
	d.TrunkDecodedBytes -= prev.TrunkDecodedBytes
	d.TrunkDecodeTime -= prev.TrunkDecodeTime
	d.CacheHits -= prev.CacheHits
	d.CacheMisses -= prev.CacheMisses
	d.Passes -= prev.Passes
	d.Rows -= prev.Rows
	d.ExpertUnion -= prev.ExpertUnion
	d.MoELayerPasses -= prev.MoELayerPasses
	d.SpecPasses -= prev.SpecPasses
	d.SpecRows -= prev.SpecRows
	d.SpecAccepted -= prev.SpecAccepted
	d.IOTime -= prev.IOTime
	d.ComputeTime -= prev.ComputeTime
	d.WaitTime -= prev.WaitTime
	d.ForwardTime -= prev.ForwardTime
	d.PrefixHits -= prev.PrefixHits
	d.PrefixMisses -= prev.PrefixMisses
	d.PrefixTokens -= prev.PrefixTokens
	d.PrefixSaves -= prev.PrefixSaves
	d.PrefixEvictions -= prev.PrefixEvictions
	d.PrefixBad -= prev.PrefixBad
	d.PrefixRestoreTime -= prev.PrefixRestoreTime
	d.PrefixSaveTime -= prev.PrefixSaveTime
	d.ConstrainedGenerations -= prev.ConstrainedGenerations
	d.MaskedTokens -= prev.MaskedTokens
	d.MaskTime -= prev.MaskTime
	d.PlanMoves -= prev.PlanMoves
	d.ReloadedBytes -= prev.ReloadedBytes
	return d
}

// Stats returns the Model's counters.
func (m *Model) Stats() Stats { return Stats(m.e.Stats()) }

// ObservePasses makes f be called after every forward pass of the model's
// sessions with the pass's token rows (summed over the sessions in it) and
// its wall time, for metrics such as a histogram of rows per pass. f runs
// on the goroutine that runs the passes, so it must be quick; nil stops
// the calls. One observer at a time: a later call replaces it.
func (m *Model) ObservePasses(f func(rows int, d time.Duration)) { m.e.ObservePasses(f) }
