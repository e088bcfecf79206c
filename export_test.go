package k3

import (
	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/specpolicy"
)

// FullRecompute returns opts with the full-recompute oracle on: every token
// re-runs a fresh forward over the whole sequence, which must give exactly
// the tokens of incremental decoding.
func FullRecompute(opts GenerateOptions) GenerateOptions {
	opts.fullRecompute = true
	return opts
}

// StreamingSpecCost is a pass model of a streamed trunk (a row adds a
// tenth of a pass), ResidentSpecCost one where every row costs as much as
// a pass (no draft pays).
var (
	StreamingSpecCost = &specpolicy.Cost{CPUFixed: 1, CPURow: 0.1}
	ResidentSpecCost  = &specpolicy.Cost{CPURow: 1}
)

// FixSpecCost makes the models opened until the test ends take c as
// SpeculateAuto's pass costs instead of measuring them, so that auto's
// choices are the same on every machine.
func FixSpecCost(t interface{ Cleanup(func()) }, c *specpolicy.Cost) {
	engine.SpecCostForTests.Store(c)
	t.Cleanup(func() { engine.SpecCostForTests.Store(nil) })
}
