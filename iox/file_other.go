//go:build !linux

package iox

import (
	"errors"
	"os"
	"runtime"
)

// openDirect: O_DIRECT is implemented on Linux only; elsewhere reads are
// buffered.
func openDirect(path string, buffered *os.File) (int, string, error) {
	return -1, "O_DIRECT is not implemented on " + runtime.GOOS, nil
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
