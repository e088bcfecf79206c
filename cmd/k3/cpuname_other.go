//go:build !darwin && !freebsd

package main

// sysctlCPUName: Linux reads /proc/cpuinfo; elsewhere the name is unknown.
func sysctlCPUName() string { return "" }
