package sysinfo

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func memoryInfo(procRoot, cgRoot string) (MemInfo, error) { return readMemInfo(procRoot, cgRoot) }

func freeSpace(dir string) (DiskSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return DiskSpace{}, fmt.Errorf("iox: statfs %s: %w", dir, err)
	}
	return DiskSpace{
		Free:   int64(st.Bavail) * int64(st.Bsize),
		Total:  int64(st.Blocks) * int64(st.Bsize),
		FSType: fsTypeName(int64(st.Type)),
	}, nil
}

func fsTypeName(magic int64) string {
	switch uint32(magic) {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.RAMFS_MAGIC:
		return "ramfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.F2FS_SUPER_MAGIC:
		return "f2fs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	case 0x2fc12fc1:
		return "zfs"
	case 0xfe534d42, 0xff534d42:
		return "smb"
	case 0x01021997:
		return "9p"
	}
	return fmt.Sprintf("0x%x", uint32(magic))
}
