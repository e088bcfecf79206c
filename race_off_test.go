//go:build !race

package k3_test

const raceEnabled = false
