//go:build unix

package iox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("%s: lock: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing the last descriptor releases the lock
}
