//go:build unix

package prefix

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// canLock reports whether tryLock really locks; without it, temporary
// files of killed writers are never removed (they cannot be told from
// live ones).
const canLock = true

// tryLock takes an exclusive flock on f without waiting. The lock belongs
// to f's open file description: it ends when f is closed or the process
// dies, however it dies, and it conflicts with every other open of the
// file, in this process or another.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		}
		return false, err
	}
}

// isNoSpace reports a full file system or an exhausted quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// isNotPermitted reports an error that every later write into the
// directory would repeat.
func isNotPermitted(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}
