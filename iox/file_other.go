//go:build !linux && !darwin

package iox

import (
	"errors"
	"os"
	"runtime"
)

// openDirect: reads that bypass the page cache are implemented on Linux
// (O_DIRECT) and macOS (F_NOCACHE); here (Windows, the BSDs, …) reads are
// buffered.
func openDirect(path string, buffered *os.File) (int, string, error) {
	return -1, "uncached reads (O_DIRECT, F_NOCACHE) are not implemented on " + runtime.GOOS + ": reads are buffered", nil
}

func sysPread(fd int, p []byte, off int64) (int, error) {
	return 0, errors.ErrUnsupported
}

func closeFD(fd int) error { return nil }

func adviseRandom(f *os.File) {}

func dropCache(f *os.File, off, n int64) error { return nil }

func openDirectWrite(path string) (int, error) { return -1, errors.ErrUnsupported }

func sysPwrite(fd int, p []byte, off int64) (int, error) { return 0, errors.ErrUnsupported }

func fsyncFD(fd int) error { return errors.ErrUnsupported }

// changed is not available here; the caller falls back to CheckSize.
func (f *File) changed() (changed, ok bool) { return false, false }
