package engine

import (
	"fmt"
	"runtime"

	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/trunk"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/model"
)

// RankWeights is one rank's slice of a checkpoint as the planner sees it:
// its rows of the trunk (Weights.Parts), of the output head and of every
// routed expert (Weights.Sizes.Experts counts what its expert cache holds
// one of per slot: each expert's halves in a cluster).
type RankWeights struct {
	*planner.Weights
	// ExpertBytes is the mean bytes of one routed expert's rows on the
	// rank, all its halves together (the whole expert with one rank).
	ExpertBytes int64
}

// Shard returns the planner's summary of rank rank's slice of a cluster
// of ranks ranks, as that rank plans it: its rows from the checkpoint's
// shards (model.Plan.Shard; a packed trunk is not sharded).
func (x *Inspection) Shard(rank, ranks int) (*RankWeights, error) {
	p, err := x.plan.Shard(rank, ranks)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	if ranks == 1 {
		return &RankWeights{Weights: x.Weights, ExpertBytes: x.Weights.Sizes.ExpertBytes}, nil
	}
	w := trunk.NewLayout(p).Weights()
	rw := &RankWeights{Weights: w}
	var sum int64
	xs := p.Experts()
	for l := 0; l < xs.Layers(); l++ {
		for e := 0; e < xs.Experts(l); e++ {
			sum += xs.Loc(l, e).Size
		}
	}
	if n := x.plan.Experts().Count(); n > 0 {
		rw.ExpertBytes = sum / n
	}
	return rw, nil
}

// WorkerRequest is the planner's request of a rank other than 0 of a
// cluster of ranks ranks with budget bytes (the one a Worker plans with),
// for rank 0's sessions sessions speculating up to speculate drafts a
// pass (0: none): its KDA heads of their states and of their
// speculations, and the default RAM tier of its slices of the prefix
// cache's entries, no other state, no scratch beyond the rounds it
// serves.
func (x *Inspection) WorkerRequest(budget int64, ranks, sessions, speculate int) planner.Request {
	ram := headCacheRAM(x.plan.Cfg, ranks, sessions, 0)
	return workerRequest(budget, x.Request.Threads, x.Request.IOQueueDepth, ranks, sessions, speculate, ram)
}

// workerRequest is a worker's planner request: threads (0: GOMAXPROCS)
// and reads in flight as given, heads of sessions (0: 1) states and of
// their speculations of up to speculate drafts, and prefixRAM for its
// slices of the prefix cache's entries.
func workerRequest(budget int64, threads, ioDepth, ranks, sessions, speculate int, prefixRAM int64) planner.Request {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return planner.Request{Budget: budget, Sessions: max(sessions, 1), MaxContext: 1, Threads: threads,
		IOQueueDepth: ioDepth, Executable: rss.ExecutableBytes(), Ranks: ranks, Worker: true, PrefixRAM: prefixRAM,
		Speculate: max(speculate, 0)}
}

// DecodeTraffic returns the rounds of one decoding pass of rows sequences
// (one token each, every one wanting its logits) on rank 0 of a cluster of
// ranks ranks planned by mem, with union distinct experts per MoE layer
// (the mean), and the bytes rank 0 sends and receives in them
// (cluster.Traffic). The rows go in sub-passes of mem.Rows in tiles of
// mem.Tile, as ForwardBatch splits them; each sub-pass takes its share of
// the union.
func DecodeTraffic(cfg *model.Config, mem *planner.MemoryPlan, ranks, rows int, union float64) (rounds int, sent, received int64) {
	if ranks < 2 || rows <= 0 {
		return 0, 0, 0
	}
	per := max(mem.Rows, 1)
	for done := 0; done < rows; done += per {
		n := min(per, rows-done)
		r := model.CountRounds(cfg, n, n, mem.Tile, n, union*float64(n)/float64(rows))
		s, rc := cluster.Traffic(ranks, r)
		rounds, sent, received = rounds+r.Rounds, sent+s, received+rc
	}
	return rounds, sent, received
}
