//go:build !unix

package batchjob

// childMain: the crash tests need SIGKILL, so they run on Unix only.
func childMain() int { return 1 }
