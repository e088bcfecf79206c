package k3

import (
	"fmt"
	"sync"

	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/model"
)

// ClusterPlan is the memory plans of the ranks of a cluster running the
// inspected checkpoint, each rank with the same budget
// (Inspection.PlanCluster), and what its experts are to their caches.
// With one rank it is the plan of one process, the one PlanSessions
// returns.
type ClusterPlan struct {
	// Ranks is the cluster's size.
	Ranks int
	// Rank0 is rank 0's plan: every session's state, a pass's buffers and
	// its slice of the weights. Worker is rank 1's, whose slice is the
	// largest of the other ranks' (they differ by at most a row of each
	// matrix): its slice and the buffers of the rounds it serves; nil
	// with one rank.
	Rank0, Worker *MemoryPlan
	// Rank0Experts and WorkerExperts are their shares of the routed
	// experts.
	Rank0Experts, WorkerExperts ExpertShare

	cfg  *model.Config
	mem0 *planner.MemoryPlan
}

// ExpertShare is one rank's share of the routed experts, as its expert
// cache sees them.
type ExpertShare struct {
	// Units is how many pieces the rank's expert cache chooses from, each
	// taking one slot: every routed expert in one process; each expert's
	// two halves (its rows of w1 and w3, its rows of w2) on a rank of a
	// cluster.
	Units int64
	// ExpertBytes is the mean bytes of one routed expert's rows on the
	// rank, both halves together in a cluster: what the rank reads for an
	// expert none of whose halves is cached.
	ExpertBytes int64
}

// ClusterPass is the network side of one pass of a cluster.
type ClusterPass struct {
	// Gathers is the pass's rounds: rank 0 sends each round's inputs to
	// every worker and gathers their rows of its products.
	Gathers int
	// SentBytes is what rank 0 sends in them, every round's header and
	// inputs to each worker; ReceivedBytes what it receives, each
	// worker's rows (ClusterStats counts the same).
	SentBytes, ReceivedBytes int64
}

// clusterShards remembers the planner's summaries of the ranks' slices of
// an inspected checkpoint, by rank count; copies of an Inspection share
// it.
type clusterShards struct {
	mu     sync.Mutex
	byRank map[int][2]*engine.RankWeights // rank 0's, rank 1's
}

// PlanCluster returns the plans of the ranks of a cluster of ranks ranks,
// each with budget bytes (0: unlimited), rank 0 with room for sessions
// sessions (0: the inspected value), speculating as inspected
// (Options.Speculate; a worker given the same WorkerOptions.Speculate):
// the plans Open with
// Options.Cluster and a Worker would make, each rank's slice of the
// weights summarised from the headers once per rank count.
func (in *Inspection) PlanCluster(budget int64, ranks, sessions int) (*ClusterPlan, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("k3: %w: a cluster of %d ranks", ErrBadOptions, ranks)
	}
	cp := &ClusterPlan{Ranks: ranks, cfg: in.x.Cfg}
	if ranks == 1 {
		r := in.req
		r.Budget = budget
		if sessions > 0 {
			r.Sessions = sessions
		}
		mp, err := planner.Plan(in.w, r)
		if err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
		cp.mem0, cp.Rank0 = mp, newMemoryPlan(mp)
		cp.Rank0Experts = ExpertShare{Units: in.Sizes.Experts, ExpertBytes: in.Sizes.ExpertBytes}
		return cp, nil
	}
	ws, err := in.shards.get(in.x, ranks)
	if err != nil {
		return nil, err
	}
	r := in.req
	r.Budget, r.Ranks = budget, ranks
	if sessions > 0 {
		r.Sessions = sessions
	}
	mp, err := planner.Plan(ws[0].Weights, r)
	if err != nil {
		return nil, fmt.Errorf("k3: rank 0 of %d: %w", ranks, err)
	}
	wp, err := planner.Plan(ws[1].Weights, in.x.WorkerRequest(budget, ranks, r.Sessions, r.Speculate))
	if err != nil {
		return nil, fmt.Errorf("k3: rank 1 of %d: %w", ranks, err)
	}
	cp.mem0, cp.Rank0, cp.Worker = mp, newMemoryPlan(mp), newMemoryPlan(wp)
	cp.Rank0Experts = ExpertShare{Units: ws[0].Sizes.Experts, ExpertBytes: ws[0].ExpertBytes}
	cp.WorkerExperts = ExpertShare{Units: ws[1].Sizes.Experts, ExpertBytes: ws[1].ExpertBytes}
	return cp, nil
}

// get returns rank 0's and rank 1's slices of a cluster of ranks ranks.
func (s *clusterShards) get(x *engine.Inspection, ranks int) ([2]*engine.RankWeights, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws, ok := s.byRank[ranks]; ok {
		return ws, nil
	}
	var ws [2]*engine.RankWeights
	for rank := range ws {
		w, err := x.Shard(rank, ranks)
		if err != nil {
			return ws, err
		}
		ws[rank] = w
	}
	if s.byRank == nil {
		s.byRank = map[int][2]*engine.RankWeights{}
	}
	s.byRank[ranks] = ws
	return ws, nil
}

// DecodePass returns the gathers of one decoding pass of rows sessions
// (a token each, every one wanting its logits) on rank 0 of the cluster,
// with union distinct routed experts per MoE layer (the mean over the
// layers: it sets the products' count in the rounds' headers, and the
// rounds of the experts when rows × top-k exceed a chunk of them), and
// the bytes rank 0 sends and receives in them. Zero with one rank.
func (p *ClusterPlan) DecodePass(rows int, union float64) ClusterPass {
	g, s, r := engine.DecodeTraffic(p.cfg, p.mem0, p.Ranks, rows, union)
	return ClusterPass{Gathers: g, SentBytes: s, ReceivedBytes: r}
}
