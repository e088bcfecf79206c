//go:build darwin || freebsd

package sysinfo

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// sysctlUint reads a numeric sysctl of 4 or 8 bytes (the kernel's int,
// u_int, long or quad, whichever the name is).
func sysctlUint(name string) (uint64, error) {
	b, err := unix.SysctlRaw(name)
	if err != nil {
		return 0, err
	}
	switch len(b) {
	case 4:
		return uint64(binary.NativeEndian.Uint32(b)), nil
	case 8:
		return binary.NativeEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("sysctl %s: %d bytes, want 4 or 8", name, len(b))
}

func freeSpace(dir string) (DiskSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return DiskSpace{}, fmt.Errorf("iox: statfs %s: %w", dir, err)
	}
	return DiskSpace{
		Free:   max(int64(st.Bavail), 0) * int64(st.Bsize),
		Total:  int64(st.Blocks) * int64(st.Bsize),
		FSType: unix.ByteSliceToString(st.Fstypename[:]),
	}, nil
}
