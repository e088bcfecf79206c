package iox

import (
	"errors"
	"fmt"
	"os"
)

// ErrLocked reports a directory another process holds with LockDir.
var ErrLocked = errors.New("directory in use by another process")

// LockDir takes an exclusive advisory lock (flock) on the directory dir,
// held until unlock is called or the process ends, however it ends. A
// writer holds it while it writes temporary files into dir, so that a
// later writer that gets the lock knows the temporary files it finds there
// are stale (their writer was killed) and may remove them. It returns
// ErrLocked if another process holds the lock, and errors.ErrUnsupported
// where advisory locks are not implemented.
func LockDir(dir string) (unlock func(), err error) { return lockDir(dir) }

// SyncDir makes dir's entries durable: after a file is created or renamed
// into dir, the name survives a machine crash only once the directory is
// synced too. Where the system cannot sync a directory (Windows), it does
// nothing and returns nil.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
