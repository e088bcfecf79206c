//go:build race

package quant_test

// raceEnabled: the race detector makes sync.Pool drop items, so
// allocation counts are meaningless.
const raceEnabled = true
