package iox

// Hooks for tests in package iox_test.

// WithDirectRefused returns opts that make OpenFile behave as if opening
// the O_DIRECT descriptor failed with err.
func WithDirectRefused(opts FileOptions, err error) FileOptions {
	opts.directErr = err
	return opts
}

// ProbeWithDirectRefused is WithDirectRefused for the probe's file.
func ProbeWithDirectRefused(opts ProbeOptions, err error) ProbeOptions {
	opts.file = WithDirectRefused(opts.file, err)
	return opts
}

// WithPread returns opts whose file reads O_DIRECT through hook, which
// receives the real pread to delegate to.
func WithPread(opts FileOptions, hook func(pread func(int, []byte, int64) (int, error), fd int, p []byte, off int64) (int, error)) FileOptions {
	opts.pread = func(fd int, p []byte, off int64) (int, error) { return hook(sysPread, fd, p, off) }
	return opts
}

// WithMaxReadCall returns opts whose Reader reads at most n bytes per read
// call (n rounded down to a multiple of Align, at least Align) instead of
// MaxReadCall.
func WithMaxReadCall(opts ReaderOptions, n int64) ReaderOptions {
	opts.maxCall = n
	return opts
}
