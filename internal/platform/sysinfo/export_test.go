package sysinfo

// Hooks for tests in package sysinfo_test.

// ReadMemInfoFrom exposes the meminfo/cgroup parser on fake trees.
var ReadMemInfoFrom = readMemInfo

// ReadSysctlMem reads the memory figures of goos ("darwin" or "freebsd")
// from the sysctl values get returns.
func ReadSysctlMem(goos string, get func(name string) (uint64, error)) (MemInfo, error) {
	m := map[string]sysctlMem{"darwin": darwinMem, "freebsd": freebsdMem}[goos]
	return readSysctlMem(m, get)
}
