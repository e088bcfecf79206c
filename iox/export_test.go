package iox

// Hooks for tests in package iox_test.

// SetOpenDirectErr makes OpenFile behave as if opening the O_DIRECT
// descriptor failed with err, until the returned function is called. Tests
// that use it must not run in parallel with other OpenFile calls.
func SetOpenDirectErr(err error) (restore func()) {
	old := testOpenDirectErr
	testOpenDirectErr = err
	return func() { testOpenDirectErr = old }
}

// SetPread replaces f's raw pread (used for O_DIRECT reads). Call it before
// any read of f. The hook receives the real pread to delegate to.
func SetPread(f *File, hook func(pread func(int, []byte, int64) (int, error), fd int, p []byte, off int64) (int, error)) {
	real := f.pread
	f.pread = func(fd int, p []byte, off int64) (int, error) { return hook(real, fd, p, off) }
}

// ReadMemInfoFrom exposes the meminfo/cgroup parser on fake trees.
var ReadMemInfoFrom = readMemInfo
