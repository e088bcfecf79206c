package iox

// Hooks for tests in package iox_test.

// ReadMemInfoFrom exposes the meminfo/cgroup parser on fake trees.
var ReadMemInfoFrom = readMemInfo
