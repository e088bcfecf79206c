package sysinfo

func memoryInfo(procRoot, cgRoot string) (MemInfo, error) {
	return readSysctlMem(freebsdMem, sysctlUint)
}
