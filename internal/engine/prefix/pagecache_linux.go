package prefix

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropPageCache tells the kernel that f's cached pages will not be needed
// soon: an entry is written once and read back rarely, and the page cache
// it would occupy is better left to the checkpoint's reads.
func dropPageCache(f *os.File) {
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
