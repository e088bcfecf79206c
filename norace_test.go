//go:build !race

package k3_test

// raceEnabled: see race_test.go.
const raceEnabled = false
