//go:build race

package k3_test

// raceEnabled: the race detector adds allocations and memory of its own,
// so tests that measure them skip.
const raceEnabled = true
