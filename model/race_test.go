//go:build race

package model_test

// raceEnabled: the race detector allocates on its own, so tests that
// count allocations skip.
const raceEnabled = true
