// Package layers states k3's layering, which its test enforces: every
// package belongs to one layer, and no package imports a package of a
// higher layer. docs/ARCHITECTURE.md draws the same table.
package layers

import "strings"

// Module is the module path the table's prefixes are relative to.
const Module = "github.com/k3go/k3"

// A Layer is a rank and the package prefixes (relative to Module, "" for
// the root package) that belong to it.
type Layer struct {
	Rank     int
	Name     string
	Prefixes []string
}

// Table lists the layers from the bottom up. A prefix covers the package
// of that path and every package below it; the longest matching prefix
// decides.
var Table = []Layer{
	{0, "platform: CPU features, kernels, the worker pool, process facts, crash recovery", []string{"internal/platform"}},
	{1, "libraries: tensors, MXFP4, I/O, the expert cache, tokenizer, chat format, grammars", []string{"tensor", "quant", "iox", "cache", "tokenizer", "chat", "grammar"}},
	{2, "the network: routed experts, the model's math", []string{"expert", "model"}},
	{3, "the engine: planner, trunk, state files, scheduler, speculation policy and drafts, sequences", []string{"internal/engine"}},
	{4, "the public API", []string{""}},
	{5, "applications: server, batch jobs, synthetic checkpoints, progress, benchmarks, the command's shared flags", []string{"internal/app"}},
	// benchdata imports only the standard library, and k3 bench
	// (internal/app/bench) measures the kernels' rates on its data, so it
	// ranks with the applications, below the rest of the test support.
	{5, "benchmark inputs, which k3 bench measures the kernels with", []string{"internal/testkit/benchdata"}},
	{6, "test support: fixtures, oracles, test models, benchmark data", []string{"internal/testkit"}},
	{7, "commands and examples", []string{"cmd", "examples"}},
	// The layering test itself sits beside the table it checks.
	{7, "the layering check", []string{"internal/layers"}},
}

// Of returns the layer of a package of the module (its import path), and
// false for a path outside the module or matched by no prefix.
func Of(path string) (Layer, bool) {
	rel, ok := strings.CutPrefix(path, Module)
	if !ok || (rel != "" && rel[0] != '/') {
		return Layer{}, false
	}
	rel = strings.TrimPrefix(rel, "/")
	best, bestLen := Layer{}, -1
	for _, l := range Table {
		for _, p := range l.Prefixes {
			match := p == "" && rel == "" ||
				p != "" && (rel == p || strings.HasPrefix(rel, p+"/"))
			if match && len(p) > bestLen {
				best, bestLen = l, len(p)
			}
		}
	}
	return best, bestLen >= 0
}
