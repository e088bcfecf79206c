//go:build !linux

package iox

import (
	"errors"
	"sync"
	"unsafe"
)

// Elsewhere buffers come from the Go heap, over-allocated for alignment and
// kept reachable until Free.

var heapBufs sync.Map // base pointer → []byte

func mapAligned(size, align uintptr) (unsafe.Pointer, error) {
	raw := make([]byte, size+align)
	off := (align - uintptr(unsafe.Pointer(&raw[0]))&(align-1)) & (align - 1)
	p := unsafe.Pointer(&raw[off])
	heapBufs.Store(p, raw)
	return p, nil
}

func unmap(base unsafe.Pointer, size uintptr) error {
	heapBufs.Delete(base)
	return nil
}

func adviseHuge(b []byte) error { return errNoMmap }

func populate(b []byte) {}

var errNoMmap = errors.New("anonymous mmap not available")
