//go:build unix

package iox

import "os"

// WithNoCacheHint returns opts whose file gets its direct descriptor as
// macOS does (a plain descriptor, then a per-descriptor hint, which is
// F_NOCACHE there) with hint in place of the fcntl calls, so that the
// darwin path runs on any Unix.
func WithNoCacheHint(opts FileOptions, hint func(fd int) error) FileOptions {
	opts.directOpen = func(path string, buffered *os.File) (int, string, error) {
		return openNoCache(path, buffered, hint)
	}
	return opts
}
