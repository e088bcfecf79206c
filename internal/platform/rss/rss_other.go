//go:build !linux

// Package rss reads the process's resident set size. Outside Linux it
// reports 0 (unknown).
package rss

// Peak returns 0: unknown on this system.
func Peak() int64 { return 0 }

// Current returns 0: unknown on this system.
func Current() int64 { return 0 }

// PeakStatus returns 0: unknown on this system.
func PeakStatus() int64 { return 0 }
