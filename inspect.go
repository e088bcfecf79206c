package k3

import (
	"context"
	"fmt"

	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/planner"
)

// Inspection describes a checkpoint without loading its weights: sizes,
// the smallest budget that runs it, and the plan for any budget, in one
// process or a cluster. It keeps the checkpoint's tensor index (about half
// a kilobyte a tensor, 0.25 GB for the released shape) while it is
// reachable, for PlanCluster: let it go before opening the model within a
// tight budget.
type Inspection struct {
	// Config is the model's architecture, as Model.Config reports it.
	Config Config
	// Tensors is the number of tensors in the checkpoint's shards.
	Tensors int
	// Sizes are the weights' sizes and the work per token.
	Sizes Sizes
	// FloorBytes is the smallest RAMBudget Open accepts (with the options
	// given to Inspect); FullBytes the budget that keeps everything
	// resident.
	FloorBytes, FullBytes int64

	w      *planner.Weights
	req    planner.Request
	x      *engine.Inspection
	shards *clusterShards
}

// Inspect reads a checkpoint's config and headers and plans its memory
// exactly as Open would with the same options (RAMBudget is ignored), so
// FloorBytes is the smallest budget Open accepts. The plan counts the
// whole process: the executable that calls Inspect, the Go runtime, the
// tokenizer, the index, as Open does. It is InspectContext with
// context.Background(), as Open is OpenContext's.
func Inspect(dir string, opts Options) (*Inspection, error) {
	return InspectContext(context.Background(), dir, opts)
}

// InspectContext is Inspect with a context that can cancel reading the
// checkpoint's headers (a full-size checkpoint has many shards).
func InspectContext(ctx context.Context, dir string, opts Options) (*Inspection, error) {
	_, opts, err := opts.checkFor(dir)
	if err != nil {
		return nil, err
	}
	x, err := engine.Inspect(ctx, dir, opts.engineOptions(nil))
	if err != nil {
		return nil, err
	}
	in := &Inspection{Config: newConfig(x.Cfg), Tensors: x.Tensors, Sizes: newSizes(planner.SizesOf(x.Weights)), w: x.Weights, req: x.Request,
		x: x, shards: &clusterShards{}}
	in.FloorBytes = planner.Floor(in.w, in.req)
	in.FullBytes = planner.Full(in.w, in.req)
	return in, nil
}

// WithMaxContext returns the inspection of the same checkpoint with
// sessions of n positions, as Inspect with Options.MaxContext n would give
// (zero: the default, 4096), without reading the checkpoint again: a
// projection over many context lengths reads the headers once.
func (in *Inspection) WithMaxContext(n int) (*Inspection, error) {
	if n < 0 {
		return nil, fmt.Errorf("k3: %w: MaxContext %d is negative", ErrBadOptions, n)
	}
	if n == 0 {
		n = engine.DefaultMaxContext
	}
	out := *in
	out.req.MaxContext = n
	out.FloorBytes = planner.Floor(out.w, out.req)
	out.FullBytes = planner.Full(out.w, out.req)
	return &out, nil
}

// Plan returns the memory plan for a budget (0: unlimited).
func (in *Inspection) Plan(budget int64) (*MemoryPlan, error) {
	r := in.req
	r.Budget = budget
	mp, err := planner.Plan(in.w, r)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	return newMemoryPlan(mp), nil
}

// BytesPerToken estimates the bytes one decoded token reads at a budget:
// the streamed trunk plus every routed expert that misses the cache. The
// miss rate is taken as 1 (no reuse), the worst case; the real cache keeps
// some experts across tokens.
func (in *Inspection) BytesPerToken(budget int64) (int64, error) {
	mp, err := in.Plan(budget)
	if err != nil {
		return 0, err
	}
	if mp.CacheSlots >= int(in.Sizes.Experts) {
		return mp.TrunkBytesPerPass, nil
	}
	return mp.TrunkBytesPerPass + in.Sizes.ExpertsPerTok*in.Sizes.ExpertBytes, nil
}

// SessionsFit returns how many sessions (each with its KDA state and an MLA
// cache of the inspected MaxContext) a budget can hold at once, with one
// pass's scratch for maxBatch rows (0: the inspected MaxBatch), the trunk
// and experts streaming past the rest; 0 if not even one fits. Every
// session is a row of every decoding pass, so this bounds the batch.
func (in *Inspection) SessionsFit(budget int64, maxBatch int) int {
	r := in.req
	if maxBatch > 0 {
		r.MaxBatch = maxBatch
	}
	fits := func(n int) bool {
		r.Sessions = n
		return planner.Floor(in.w, r) <= budget
	}
	if !fits(1) {
		return 0
	}
	lo, hi := 1, 2
	for fits(hi) && hi < 1<<20 {
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// PlanSessions returns the memory plan for a budget with room for sessions
// sessions and passes of maxBatch rows (0: the inspected values), without
// reading the checkpoint again.
func (in *Inspection) PlanSessions(budget int64, sessions, maxBatch int) (*MemoryPlan, error) {
	r := in.req
	r.Budget = budget
	if sessions > 0 {
		r.Sessions = sessions
	}
	if maxBatch > 0 {
		r.MaxBatch = maxBatch
	}
	mp, err := planner.Plan(in.w, r)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	return newMemoryPlan(mp), nil
}

// Workload is the work waiting for the model's next passes: DecodeRows
// sequences generating (one row each per pass) and PromptRows prompt
// tokens still to prefill.
type Workload struct {
	DecodeRows, PromptRows int
}

// WorkPlan is the memory plan the engine takes for a workload, and what
// the planner projects that work to read there.
type WorkPlan struct {
	// Plan is where the budget goes for the work; Plan.Rows the rows of
	// its passes. Resting reports whether it is the resting plan (the
	// one Plan returns, sized for decoding); otherwise the engine moves
	// there while the prompts are prefilled, and back after.
	Plan    *MemoryPlan
	Resting bool
	// Passes is the passes the prompt rows take (1 for decoding alone);
	// BytesRead the planner's estimate of what they read, the moves there
	// and back included (trunk parts pinned again, the expert cache's warm
	// contents), with routing spread evenly over the experts.
	Passes    int
	BytesRead int64
}

// PlanWork returns the plan the engine chooses for work w at a budget with
// room for sessions sessions (0: the inspected value), starting from its
// resting plan: the resting plan while no prompt waits; for waiting
// prompts the plan of wider passes whose move and passes read least.
func (in *Inspection) PlanWork(budget int64, sessions int, w Workload) (*WorkPlan, error) {
	r := in.req
	r.Budget = budget
	if sessions > 0 {
		r.Sessions = sessions
	}
	res, err := planner.NewResidency(in.w, r)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	work := planner.Work{DecodeRows: w.DecodeRows, PromptRows: w.PromptRows}
	i := res.Choose(0, work)
	return &WorkPlan{Plan: newMemoryPlan(res.Plans[i]), Resting: i == 0, Passes: res.Passes(i, work),
		BytesRead: int64(res.Cost(0, i, work))}, nil
}
