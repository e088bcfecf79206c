//go:build darwin || freebsd

package main

import "golang.org/x/sys/unix"

// sysctlCPUName is the CPU's name where there is no /proc/cpuinfo:
// machdep.cpu.brand_string on macOS ("Apple M4 Pro"), hw.model on FreeBSD.
func sysctlCPUName() string {
	for _, name := range []string{"machdep.cpu.brand_string", "hw.model"} {
		if s, err := unix.Sysctl(name); err == nil && s != "" {
			return s
		}
	}
	return ""
}
