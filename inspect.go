package k3

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Inspection describes a checkpoint without loading its weights: sizes,
// the smallest budget that runs it, and the plan for any budget.
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

	plan *model.Plan
	req  model.BudgetRequest
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
	cfg, err := readConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	ck, err := iox.OpenCheckpointContext(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", checkpointErr(err))
	}
	defer ck.Close()
	plan, err := model.NewPlan(cfg, ck)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", checkpointErr(err))
	}
	// A compressed pack that Open may read decodes each part in place, in
	// a little more room than its image; plan with its layout as Open
	// would.
	if opts.TrunkDir != "" && opts.TrunkCompression != CompressionOff {
		x, err := model.ReadPackIndex(opts.TrunkDir)
		if err != nil {
			return nil, fmt.Errorf("k3: packed trunk %s: %w", opts.TrunkDir, checkpointErr(err))
		}
		if x.Compressed {
			if err := plan.PlanPacked(x); err != nil {
				return nil, fmt.Errorf("k3: packed trunk %s: %w: %w", opts.TrunkDir, ErrBadCheckpoint, err)
			}
		}
	}
	req := budgetRequest(dir, opts)
	req.Budget = 0
	in := &Inspection{Config: newConfig(cfg), Tensors: ck.Len(), Sizes: newSizes(plan.Sizes()), plan: plan, req: req}
	in.FloorBytes = plan.FloorBudget(req)
	in.FullBytes = plan.FullBudget(req)
	return in, nil
}

// Plan returns the memory plan for a budget (0: unlimited).
func (in *Inspection) Plan(budget int64) (*MemoryPlan, error) {
	r := in.req
	r.Budget = budget
	mp, err := in.plan.PlanMemory(r)
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
		return in.plan.FloorBudget(r) <= budget
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
	mp, err := in.plan.PlanMemory(r)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", err)
	}
	return newMemoryPlan(mp), nil
}
