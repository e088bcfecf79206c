//go:build linux

// Package rss reads the process's resident set size.
package rss

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// Peak returns the peak resident set size of the process in bytes: VmHWM
// of /proc/self/status, or getrusage's maxrss where /proc is not mounted,
// or 0. VmHWM first, because maxrss survives execve on Linux: a process
// started by a large parent (a test binary that runs itself as a child)
// would report the parent's peak at the time of the fork.
func Peak() int64 {
	if n := PeakStatus(); n > 0 {
		return n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}

// Current returns the current resident set size in bytes from
// /proc/self/status (VmRSS), or 0 where unavailable.
func Current() int64 {
	return statusField("VmRSS:")
}

// PeakStatus returns VmHWM from /proc/self/status: the peak RSS, which
// unlike getrusage can be reset by writing 5 to /proc/self/clear_refs.
func PeakStatus() int64 {
	return statusField("VmHWM:")
}

func statusField(name string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(name)) {
			continue
		}
		f := bytes.Fields(line[len(name):])
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}
