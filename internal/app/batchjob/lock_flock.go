//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package batchjob

import (
	"os"
	"syscall"
)

// haveFlock reports whether lockFile locks.
const haveFlock = true

// lockFile takes an exclusive advisory lock on f without waiting, so two
// jobs never append to one output (their lines could interleave with
// each other's resumes). The lock ends when f is closed or the process
// dies.
func lockFile(f *os.File) (unlock func(), err error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
