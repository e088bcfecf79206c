//go:build !unix

package prefix

// childMain: the crash tests need SIGKILL and flock, so they run on Unix
// only.
func childMain() int { return 2 }
