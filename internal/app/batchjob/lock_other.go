//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package batchjob

import "os"

// haveFlock reports whether lockFile locks.
const haveFlock = false

// lockFile does nothing where flock(2) is missing: there, running two jobs
// on one output at once is the user's to avoid.
func lockFile(f *os.File) (unlock func(), err error) { return func() {}, nil }
