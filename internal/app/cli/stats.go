package cli

import (
	"fmt"

	"github.com/k3go/k3"
)

// StatsJSON is the "stats" object of the --json output of k3 generate
// (and of its --batch-file, with more fields): k3.Stats in seconds and
// GB/s.
type StatsJSON struct {
	BudgetBytes     int64   `json:"budget_bytes"`
	PlannedBytes    int64   `json:"planned_bytes"`
	BytesRead       int64   `json:"bytes_read"`
	TrunkBytesRead  int64   `json:"trunk_bytes_read"`
	EmbedBytesRead  int64   `json:"embed_bytes_read"`
	ExpertBytesRead int64   `json:"expert_bytes_read"`
	CacheHits       int64   `json:"cache_hits"`
	CacheMisses     int64   `json:"cache_misses"`
	PinnedLayers    int     `json:"pinned_layers"`
	StreamedParts   int     `json:"streamed_parts"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	IOSeconds       float64 `json:"io_seconds"`
	ComputeSeconds  float64 `json:"compute_seconds"`
	WaitSeconds     float64 `json:"wait_seconds"`
	ForwardSeconds  float64 `json:"forward_seconds"`
	ReadGBps        float64 `json:"read_gbps"`
	Passes          int64   `json:"passes"`
	SpecPasses      int64   `json:"spec_passes,omitempty"`
	SpecRows        int64   `json:"spec_rows,omitempty"`
	SpecAccepted    int64   `json:"spec_accepted,omitempty"`
	PlanMoves       int64   `json:"plan_moves"`
	ReloadedBytes   int64   `json:"reloaded_bytes"`
	*ClusterJSON
}

// ClusterJSON are the keys a run over a cluster adds (--peers): its size,
// the rounds of products exchanged with the other ranks (gathers) per
// generated token, their bytes and their time.
type ClusterJSON struct {
	Ranks            int     `json:"ranks"`
	Gathers          int64   `json:"gathers"`
	GathersPerToken  float64 `json:"gathers_per_token"`
	BytesPerGather   float64 `json:"bytes_per_gather"`
	SecondsPerGather float64 `json:"seconds_per_gather"`
	// WaitPerGather is the part of a gather rank 0 waited for the other
	// ranks after its own rows were done.
	WaitPerGather float64 `json:"wait_seconds_per_gather"`
	// StateBytes is the bytes of sequences' KDA heads moved whole
	// between the ranks (k3.ClusterStats.StateBytes).
	StateBytes int64 `json:"state_bytes"`
}

// NewClusterJSON returns the cluster's keys for tokens generated tokens,
// nil for one process.
func NewClusterJSON(cs k3.ClusterStats, tokens int) *ClusterJSON {
	if cs.Ranks <= 1 {
		return nil
	}
	j := &ClusterJSON{Ranks: cs.Ranks, Gathers: cs.Rounds, StateBytes: cs.StateBytes}
	if tokens > 0 {
		j.GathersPerToken = float64(cs.Rounds) / float64(tokens)
	}
	if cs.Rounds > 0 {
		j.BytesPerGather = float64(cs.BytesSent+cs.BytesReceived) / float64(cs.Rounds)
		j.SecondsPerGather = cs.RoundTime.Seconds() / float64(cs.Rounds)
		j.WaitPerGather = cs.WaitTime.Seconds() / float64(cs.Rounds)
	}
	return j
}

// String is the cluster's line of --stats.
func (j *ClusterJSON) String() string {
	return fmt.Sprintf("cluster of %d ranks: %d gathers (%.1f per token), %.1f kB and %.3f ms each (rank 0 waited %.3f ms of it); %.1f MB of states moved",
		j.Ranks, j.Gathers, j.GathersPerToken, j.BytesPerGather/1e3, 1e3*j.SecondsPerGather, 1e3*j.WaitPerGather, float64(j.StateBytes)/1e6)
}

// NewStatsJSON converts s.
func NewStatsJSON(s k3.Stats) *StatsJSON {
	return &StatsJSON{
		BudgetBytes: s.BudgetBytes, PlannedBytes: s.PlannedBytes, BytesRead: s.BytesRead,
		TrunkBytesRead: s.TrunkBytesRead, ExpertBytesRead: s.ExpertBytesRead, EmbedBytesRead: s.EmbedBytesRead,
		CacheHits: s.CacheHits, CacheMisses: s.CacheMisses, PinnedLayers: s.PinnedLayers, StreamedParts: s.StreamedParts,
		PeakRSSBytes: s.PeakRSSBytes, IOSeconds: s.IOTime.Seconds(), ComputeSeconds: s.ComputeTime.Seconds(),
		WaitSeconds: s.WaitTime.Seconds(), ForwardSeconds: s.ForwardTime.Seconds(), ReadGBps: s.ReadGBps(),
		Passes: s.Passes, SpecPasses: s.SpecPasses, SpecRows: s.SpecRows, SpecAccepted: s.SpecAccepted,
		PlanMoves: s.PlanMoves, ReloadedBytes: s.ReloadedBytes,
	}
}

// FormatStats is s as the three lines --stats prints on stderr: the
// budget and plan, the bytes read and the cache, the time split.
func FormatStats(s k3.Stats) string {
	gb := func(n int64) float64 { return float64(n) / 1e9 }
	budget := "unlimited"
	if s.BudgetBytes > 0 {
		budget = fmt.Sprintf("%.2f GB", gb(s.BudgetBytes))
	}
	return fmt.Sprintf("budget %s (planned %.2f GB), %d layers pinned, %d parts streamed\n"+
		"read %.3f GB (trunk %.3f, experts %.3f, embedding rows %.3f, trunk pinned again after plan moves %.3f, alignment of direct reads %.3f) at %.2f GB/s; cache %d hits, %d misses\n"+
		"forward %.3f s: compute %.3f s, waiting for weights %.3f s; I/O busy %.3f s; peak RSS %.2f GB",
		budget, gb(s.PlannedBytes), s.PinnedLayers, s.StreamedParts,
		gb(s.BytesRead), gb(s.TrunkBytesRead), gb(s.ExpertBytesRead), gb(s.EmbedBytesRead), gb(s.ReloadedBytes),
		gb(s.BytesRead-s.TrunkBytesRead-s.ExpertBytesRead-s.EmbedBytesRead-s.ReloadedBytes), s.ReadGBps(), s.CacheHits, s.CacheMisses,
		s.ForwardTime.Seconds(), s.ComputeTime.Seconds(), s.WaitTime.Seconds(), s.IOTime.Seconds(), gb(s.PeakRSSBytes))
}
