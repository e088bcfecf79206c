package k3

// FullRecompute returns opts with the full-recompute oracle on: every token
// re-runs a fresh forward over the whole sequence, which must give exactly
// the tokens of incremental decoding.
func FullRecompute(opts GenerateOptions) GenerateOptions {
	opts.fullRecompute = true
	return opts
}
