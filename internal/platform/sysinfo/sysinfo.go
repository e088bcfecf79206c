// Package sysinfo reports what the machine offers the engine: the memory
// the process may use (physical, available, and a cgroup limit on Linux;
// sysctl on macOS and FreeBSD; GlobalMemoryStatusEx on Windows) and the
// space and kind of the file system holding a directory. No cgo.
package sysinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DiskSpace describes the file system holding a directory.
type DiskSpace struct {
	Free  int64 // bytes available to an unprivileged user (statfs f_bavail)
	Total int64 // bytes in the file system
	// FSType is the file system's name: on Linux "ext4", "xfs", "btrfs",
	// "tmpfs", "overlay", "nfs", … or the magic number in hex; on macOS and
	// FreeBSD statfs's f_fstypename ("apfs", "zfs", "ufs", …); on Windows
	// the volume's ("NTFS", "ReFS", …).
	FSType string
}

// FreeSpace reports the free space of the file system holding dir: statfs
// on Linux, macOS and FreeBSD, GetDiskFreeSpaceEx on Windows;
// errors.ErrUnsupported elsewhere.
func FreeSpace(dir string) (DiskSpace, error) { return freeSpace(dir) }

// MemInfo describes the memory the process may use, for the budget planner
// and `k3 doctor`. Sizes are bytes; 0 means unknown or unlimited.
type MemInfo struct {
	// Total is the physical memory: MemTotal from /proc/meminfo on Linux,
	// hw.memsize on macOS, hw.physmem on FreeBSD, ullTotalPhys
	// (GlobalMemoryStatusEx) on Windows.
	Total int64
	// Available is the memory that can be allocated without swapping:
	// MemAvailable on Linux; on macOS the free, speculative, purgeable and
	// file-backed pages (vm.page_*_count), the pages the kernel can hand
	// out without compressing or swapping anything; on FreeBSD the free and
	// inactive pages; on Windows ullAvailPhys.
	Available int64
	// CgroupLimit is the smallest memory limit from the process's cgroup up
	// to the root: memory.max and memory.high (v2), or
	// memory.limit_in_bytes (v1). 0 if there is none.
	CgroupLimit int64
	// CgroupUsage is the cgroup's current charge (memory.current, or
	// memory.usage_in_bytes for v1), page cache included.
	CgroupUsage int64
	// CgroupVersion is 2, 1, or 0 if no memory cgroup was found.
	CgroupVersion int
	// Cgroup is the directory the limit was read from, if any.
	Cgroup string
}

// Limit is the most memory the process can hold: Total, or the cgroup
// limit if smaller.
func (m MemInfo) Limit() int64 {
	if m.CgroupLimit > 0 && (m.Total == 0 || m.CgroupLimit < m.Total) {
		return m.CgroupLimit
	}
	return m.Total
}

// Headroom is the memory that can be allocated now without reclaim: the
// smaller of MemAvailable and the cgroup limit minus its usage. The cgroup's
// usage counts page cache, which the kernel can reclaim, so this is
// conservative under a cgroup.
func (m MemInfo) Headroom() int64 {
	h := m.Available
	if m.CgroupLimit > 0 {
		c := max(m.CgroupLimit-m.CgroupUsage, 0)
		if h == 0 || c < h {
			h = c
		}
	}
	return h
}

// MemoryInfo reads total and available RAM and, on Linux, the cgroup
// memory limit (v2, or v1 where only that is mounted). Linux, macOS,
// FreeBSD and Windows; errors.ErrUnsupported elsewhere.
func MemoryInfo() (MemInfo, error) { return memoryInfo("/proc", "/sys/fs/cgroup") }

// readMemInfo parses procRoot/meminfo and the cgroup files under cgRoot
// for the process described by procRoot/self/cgroup.
func readMemInfo(procRoot, cgRoot string) (MemInfo, error) {
	var m MemInfo
	b, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return m, fmt.Errorf("iox: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 2 && f[2] == "kB" {
			v *= 1024
		}
		switch f[0] {
		case "MemTotal:":
			m.Total = v
		case "MemAvailable:":
			m.Available = v
		}
	}
	if m.Total == 0 {
		return m, fmt.Errorf("iox: no MemTotal in %s", filepath.Join(procRoot, "meminfo"))
	}

	cg, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return m, nil // no cgroup information: not an error
	}
	var v1Path, v2Path string
	hasV2 := false
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, hasV2 = parts[2], true
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				v1Path = parts[2]
			}
		}
	}
	if _, err := os.Stat(filepath.Join(cgRoot, "cgroup.controllers")); err == nil && hasV2 {
		m.CgroupVersion = 2
		m.Cgroup = cgroupDir(cgRoot, v2Path)
		m.CgroupLimit = walkLimit(cgRoot, m.Cgroup, "memory.max", "memory.high")
		m.CgroupUsage = readBytesFile(filepath.Join(m.Cgroup, "memory.current"))
	} else if v1Path != "" {
		root := filepath.Join(cgRoot, "memory")
		if _, err := os.Stat(root); err == nil {
			m.CgroupVersion = 1
			m.Cgroup = cgroupDir(root, v1Path)
			m.CgroupLimit = walkLimit(root, m.Cgroup, "memory.limit_in_bytes")
			m.CgroupUsage = readBytesFile(filepath.Join(m.Cgroup, "memory.usage_in_bytes"))
		}
	}
	return m, nil
}

// cgroupDir maps a cgroup path to its directory under root; inside a
// container without a cgroup namespace the path may not exist there, and
// the root is the best guess.
func cgroupDir(root, path string) string {
	dir := filepath.Join(root, filepath.FromSlash(path))
	if _, err := os.Stat(dir); err != nil {
		return root
	}
	return dir
}

// walkLimit returns the smallest limit in files from dir up to root.
func walkLimit(root, dir string, files ...string) int64 {
	var lim int64
	for {
		for _, f := range files {
			if v := readBytesFile(filepath.Join(dir, f)); v > 0 && (lim == 0 || v < lim) {
				lim = v
			}
		}
		if dir == root || len(dir) <= len(root) {
			return lim
		}
		dir = filepath.Dir(dir)
	}
}

// readBytesFile reads a cgroup value; "max", absent, unparsable and the v1
// "unlimited" (≥ 2^62) all read as 0.
func readBytesFile(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0
	}
	return v
}

// sysctlMem describes where a BSD kernel's sysctl tree holds the memory
// figures: the physical memory, the page size, and the page counts whose
// sum is the available memory.
type sysctlMem struct {
	total    string   // bytes of physical memory
	pageSize []string // the VM page size: the first name that answers
	// avail are page counts summed into Available; the first must answer,
	// the others are optional (not every kernel version has them).
	avail []string
}

// darwinMem: XNU counts pages of vm.pagesize (16 KiB on Apple silicon).
// Free and speculative (read-ahead) pages are handed out at once,
// purgeable ones are dropped on demand, and pageable external ones are
// file-backed cache, dropped without being written anywhere; pages of
// anonymous memory (pageable internal) would have to be compressed or
// swapped, so they are not available.
var darwinMem = sysctlMem{
	total:    "hw.memsize",
	pageSize: []string{"vm.pagesize", "hw.pagesize"},
	avail:    []string{"vm.page_free_count", "vm.page_speculative_count", "vm.page_purgeable_count", "vm.page_pageable_external_count"},
}

// freebsdMem: free and inactive pages (v_cache_count on kernels before
// 12); laundry pages are dirty and need writing first, so they are left
// out.
var freebsdMem = sysctlMem{
	total:    "hw.physmem",
	pageSize: []string{"vm.stats.vm.v_page_size", "hw.pagesize"},
	avail:    []string{"vm.stats.vm.v_free_count", "vm.stats.vm.v_inactive_count", "vm.stats.vm.v_cache_count"},
}

// readSysctlMem reads m through get, which returns a sysctl's value by
// name. Available is capped at Total.
func readSysctlMem(m sysctlMem, get func(name string) (uint64, error)) (MemInfo, error) {
	total, err := get(m.total)
	if err != nil || total == 0 || total > 1<<62 {
		return MemInfo{}, fmt.Errorf("iox: sysctl %s: %d, %v", m.total, total, err)
	}
	var page uint64
	for _, name := range m.pageSize {
		if v, err := get(name); err == nil && v > 0 && v&(v-1) == 0 && v <= 1<<30 {
			page = v
			break
		}
	}
	if page == 0 {
		return MemInfo{}, fmt.Errorf("iox: no page size from sysctl %s", strings.Join(m.pageSize, ", "))
	}
	var pages uint64
	for i, name := range m.avail {
		v, err := get(name)
		if err != nil {
			if i == 0 {
				return MemInfo{}, fmt.Errorf("iox: sysctl %s: %w", name, err)
			}
			continue
		}
		pages += v
	}
	return MemInfo{Total: int64(total), Available: int64(min(pages*page, total))}, nil
}
