//go:build unix

package iox

import "syscall"

// openNonblock keeps open(2) from waiting for a FIFO's writer; it changes
// nothing for a regular file.
const openNonblock = syscall.O_NONBLOCK
