//go:build unix

package iox

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openNoCache opens path a second time, read-only, and applies hint to the
// new descriptor to keep its reads out of the page cache: on macOS, where
// there is no O_DIRECT, hint sets F_NOCACHE and turns read-ahead off. The
// descriptor then serves a [File]'s direct reads exactly as an O_DIRECT one
// does on Linux (the same [Reader] path, the same [Stats] counters). A
// refused hint is a reason to read buffered, not an error; the error is
// reserved for a path that now names another file than the buffered
// descriptor.
func openNoCache(path string, buffered *os.File, hint func(fd int) error) (fd int, reason string, err error) {
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, "open uncached descriptor: " + err.Error(), nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, "fstat uncached descriptor: " + err.Error(), nil
	}
	if bfi, err := buffered.Stat(); err == nil {
		if bst, ok := bfi.Sys().(*syscall.Stat_t); ok && (uint64(bst.Dev) != uint64(st.Dev) || uint64(bst.Ino) != uint64(st.Ino)) {
			unix.Close(fd)
			return -1, "", fmt.Errorf("iox: %s was replaced while being opened", path)
		}
	}
	if err := hint(fd); err != nil {
		unix.Close(fd)
		return -1, err.Error(), nil
	}
	return fd, "", nil
}
