package synth

import "syscall"

// oDirect is the O_DIRECT open flag.
const oDirect = syscall.O_DIRECT

// freeBytes returns the bytes available to an unprivileged user on the
// file system holding dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1, err
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), nil
}
