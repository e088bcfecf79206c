//go:build !race

package model_test

// raceEnabled: see race_test.go.
const raceEnabled = false
