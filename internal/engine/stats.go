package engine

import (
	"time"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/platform/rss"
)

// Stats are the engine's cumulative counters; see k3.Stats, whose fields
// they are.
type Stats struct {
	BudgetBytes, PlannedBytes                  int64
	PinnedLayers, StreamedParts                int
	BytesRead, TrunkBytesRead, ExpertBytesRead int64
	EmbedBytesRead                             int64
	TrunkDecodedBytes                          int64
	TrunkDecodeTime                            time.Duration
	CacheHits, CacheMisses                     int64
	Passes, Rows                               int64
	ExpertUnion, MoELayerPasses                int64
	SpecPasses, SpecRows, SpecAccepted         int64
	IOTime, ComputeTime, WaitTime, ForwardTime time.Duration
	PeakRSSBytes                               int64
	PrefixHits, PrefixMisses, PrefixTokens     int64
	PrefixSaves, PrefixEvictions, PrefixBad    int64
	PrefixRAMBytes, PrefixDiskBytes            int64
	PrefixRestoreTime, PrefixSaveTime          time.Duration
	ConstrainedGenerations, MaskedTokens       int64
	MaskTime                                   time.Duration
	PlanMoves, ReloadedBytes                   int64
}

// Stats returns the counters since Open.
func (e *Engine) Stats() Stats {
	mp := e.res.Plans[e.cur.Load()]
	s := Stats{BudgetBytes: e.opts.RAMBudget, PlannedBytes: mp.Total(), PinnedLayers: mp.PinnedLayers}
	for _, p := range mp.Pinned {
		if !p {
			s.StreamedParts++
		}
	}
	rs := e.reader.Stats()
	s.BytesRead = rs.BytesRead - e.loadBytes
	s.IOTime = rs.BusyTime - e.loadBusy
	ms := e.m.Stats()
	ts := e.trunk.Stats()
	s.TrunkBytesRead = ts.StreamedBytes
	s.TrunkDecodedBytes, s.TrunkDecodeTime = ts.DecodedBytes, ts.DecodeTime
	s.PlanMoves, s.ReloadedBytes = e.moves.Load(), ts.ReloadedBytes
	wait := ts.WaitTime
	if e.xs != nil {
		var xs expert.StreamStats = e.xs.ExpertStats()
		s.ExpertBytesRead, s.CacheHits, s.CacheMisses = xs.BytesRead, xs.Hits, xs.Misses
		wait += xs.Wait
	}
	s.Passes, s.Rows, s.EmbedBytesRead = ms.Passes, ms.Rows, ms.EmbedBytes
	s.ExpertUnion, s.MoELayerPasses = ms.ExpertUnion, ms.MoELayerPasses
	s.SpecPasses, s.SpecRows, s.SpecAccepted = e.specPasses.Load(), e.specRows.Load(), e.specAccepted.Load()
	s.ForwardTime, s.WaitTime = ms.ForwardTime, wait
	s.ComputeTime = ms.ForwardTime - wait
	s.PeakRSSBytes = rss.Peak()
	s.ConstrainedGenerations, s.MaskedTokens, s.MaskTime = e.constrained.Load(), e.maskTokens.Load(), time.Duration(e.maskNanos.Load())
	if pc := e.prefix; pc != nil {
		s.PrefixHits, s.PrefixMisses, s.PrefixTokens = pc.hits.Load(), pc.misses.Load(), pc.reused.Load()
		s.PrefixSaves = pc.saves.Load()
		s.PrefixRestoreTime, s.PrefixSaveTime = time.Duration(pc.restoreNanos.Load()), time.Duration(pc.saveNanos.Load())
		ps := pc.store.Stats()
		s.PrefixEvictions, s.PrefixBad = ps.RAMEvictions+ps.DiskEvictions, ps.BadEntries
		s.PrefixRAMBytes, s.PrefixDiskBytes = ps.RAMBytes, ps.DiskBytes
	}
	return s
}
