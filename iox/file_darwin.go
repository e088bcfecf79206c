package iox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openDirect: macOS has no O_DIRECT. The second descriptor is an ordinary
// one with F_NOCACHE set (its reads and writes do not stay in the unified
// buffer cache) and read-ahead off (F_RDAHEAD 0), so the expert cache, not
// the page cache, decides what stays in memory.
func openDirect(path string, buffered *os.File) (int, string, error) {
	return openNoCache(path, buffered, noCache)
}

// noCache sets F_NOCACHE and turns read-ahead off on fd.
func noCache(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_NOCACHE, 1); err != nil {
		return fmt.Errorf("fcntl F_NOCACHE: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_RDAHEAD, 0); err != nil {
		return fmt.Errorf("fcntl F_RDAHEAD: %w", err)
	}
	return nil
}

func sysPread(fd int, p []byte, off int64) (int, error) { return unix.Pread(fd, p, off) }

func closeFD(fd int) error { return unix.Close(fd) }

// adviseRandom turns read-ahead off on the buffered descriptor (macOS has
// no posix_fadvise).
func adviseRandom(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_RDAHEAD, 0)
}

// dropCache: macOS has no POSIX_FADV_DONTNEED; the uncached descriptor is
// how k3 keeps checkpoint reads out of the page cache there.
func dropCache(f *os.File, off, n int64) error { return nil }

// openDirectWrite opens path for writes that bypass the page cache
// (F_NOCACHE).
func openDirectWrite(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_NOCACHE, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func sysPwrite(fd int, p []byte, off int64) (int, error) { return unix.Pwrite(fd, p, off) }

func fsyncFD(fd int) error { return unix.Fsync(fd) }

// changed reports, without allocating, whether the open file's size or
// modification time differ from those recorded at open; ok=false if fstat
// fails (the caller falls back to CheckSize).
func (f *File) changed() (changed, ok bool) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.f.Fd()), &st); err != nil {
		return false, false
	}
	mt := f.modTime
	return st.Size != f.size || st.Mtim.Sec != mt.Unix() || int64(st.Mtim.Nsec) != int64(mt.Nanosecond()), true
}
