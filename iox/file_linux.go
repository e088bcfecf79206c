package iox

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openDirect opens path a second time with O_DIRECT. A refusal (EINVAL on
// tmpfs and some FUSE/network file systems, an alignment need above Align)
// is a reason, not an error: the caller reads buffered. The error is reserved
// for a path that now names another file than the buffered descriptor.
func openDirect(path string, buffered *os.File) (fd int, reason string, err error) {
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, "open O_DIRECT: " + err.Error(), nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, "fstat O_DIRECT descriptor: " + err.Error(), nil
	}
	if bfi, err := buffered.Stat(); err == nil {
		if bst, ok := bfi.Sys().(*syscall.Stat_t); ok && (uint64(bst.Dev) != uint64(st.Dev) || bst.Ino != st.Ino) {
			unix.Close(fd)
			return -1, "", fmt.Errorf("iox: %s was replaced while being opened", path)
		}
	}
	// Linux 6.1+ reports the direct I/O alignment the file needs.
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &sx) == nil && sx.Mask&unix.STATX_DIOALIGN != 0 {
		switch {
		case sx.Dio_offset_align == 0:
			unix.Close(fd)
			return -1, "file system reports no direct I/O support (statx)", nil
		case sx.Dio_offset_align > Align || sx.Dio_mem_align > Align:
			unix.Close(fd)
			return -1, fmt.Sprintf("direct I/O needs %d-byte offsets and %d-byte buffers, above %d",
				sx.Dio_offset_align, sx.Dio_mem_align, Align), nil
		}
	}
	return fd, "", nil
}

func sysPread(fd int, p []byte, off int64) (int, error) { return unix.Pread(fd, p, off) }

func closeFD(fd int) error { return unix.Close(fd) }

func adviseRandom(f *os.File) {
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
}

func dropCache(f *os.File, off, n int64) error {
	if err := unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("iox: fadvise DONTNEED %s: %w", f.Name(), err)
	}
	return nil
}

// openDirectWrite creates-or-opens path for O_DIRECT writes.
func openDirectWrite(path string) (int, error) {
	return unix.Open(path, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
}

func sysPwrite(fd int, p []byte, off int64) (int, error) { return unix.Pwrite(fd, p, off) }

func fsyncFD(fd int) error { return unix.Fsync(fd) }

// changed reports, without allocating, whether the open file's size or
// modification time differ from those recorded at open; it returns
// ok=false if fstat fails (the caller falls back to CheckSize).
func (f *File) changed() (changed, ok bool) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.f.Fd()), &st); err != nil {
		return false, false
	}
	mt := f.modTime
	return st.Size != f.size || st.Mtim.Sec != mt.Unix() || int64(st.Mtim.Nsec) != int64(mt.Nanosecond()), true
}
