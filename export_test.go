package k3

import "github.com/k3go/k3/internal/engine/specpolicy"

// FullRecompute returns opts with the full-recompute oracle on: every token
// re-runs a fresh forward over the whole sequence, which must give exactly
// the tokens of incremental decoding.
func FullRecompute(opts GenerateOptions) GenerateOptions {
	opts.fullRecompute = true
	return opts
}

// WithStreamingSpecCost returns opts with SpeculateAuto's pass costs fixed
// to those of a streamed trunk (a row adds a tenth of a pass), whatever
// this machine measures: the policy's choices become deterministic.
func WithStreamingSpecCost(opts Options) Options {
	opts.specCost = &specpolicy.Cost{CPUFixed: 1, CPURow: 0.1}
	return opts
}

// WithResidentSpecCost fixes SpeculateAuto's pass costs to those of a
// model whose every row costs as much as a pass: no draft pays.
func WithResidentSpecCost(opts Options) Options {
	opts.specCost = &specpolicy.Cost{CPURow: 1}
	return opts
}
