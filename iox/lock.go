package iox

import "errors"

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
