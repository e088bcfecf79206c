package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/engine/trunk"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Inspection is a checkpoint read for planning only: its config, its
// weights as the planner sees them, and the request Open would plan with.
type Inspection struct {
	Cfg     *model.Config
	Tensors int
	Weights *planner.Weights
	// Request is the planner's request for the options given, with no
	// budget.
	Request planner.Request

	// plan is the checkpoint's (its tensor index closed but kept) for
	// Shard.
	plan *model.Plan
}

// Inspect reads dir's config and headers and summarises them for the
// planner exactly as Open would with opts (the RAM budget is ignored).
func Inspect(ctx context.Context, dir string, opts Options) (*Inspection, error) {
	cfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	ck, err := iox.OpenCheckpointContext(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	defer ck.Close()
	plan, err := model.NewPlan(cfg, ck)
	if err != nil {
		return nil, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	lay := trunk.NewLayout(plan)
	// A compressed pack that Open may read decodes each part in place, in
	// a little more room than its image; plan with its layout as Open
	// would.
	if opts.TrunkDir != "" && opts.TrunkCompression != CompressionOff {
		x, err := trunk.ReadPackIndex(opts.TrunkDir)
		if err != nil {
			return nil, fmt.Errorf("k3: packed trunk %s: %w", opts.TrunkDir, CheckpointErr(err))
		}
		if x.Compressed {
			if err := lay.PlanPack(x); err != nil {
				return nil, fmt.Errorf("k3: packed trunk %s: %w: %w", opts.TrunkDir, model.ErrBadCheckpoint, err)
			}
		}
	}
	req := budgetRequest(dir, opts)
	req.Budget = 0
	return &Inspection{Cfg: cfg, Tensors: ck.Len(), Weights: lay.Weights(), Request: req, plan: plan}, nil
}
