//go:build race

package k3_test

// raceEnabled: the race detector multiplies memory and time, so the peak
// RSS tests skip under it.
const raceEnabled = true
