package iox

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapAligned maps size bytes (a multiple of align) of anonymous memory at an
// align-aligned address: it over-maps by align and unmaps the head and tail.
func mapAligned(size, align uintptr) (unsafe.Pointer, error) {
	page := uintptr(os.Getpagesize())
	extra := uintptr(0)
	if align > page {
		extra = align - page
	}
	total := size + extra
	p, err := unix.MmapPtr(-1, 0, nil, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	head := (align - uintptr(p)&(align-1)) & (align - 1)
	if head > 0 {
		if err := unix.MunmapPtr(p, head); err != nil {
			unix.MunmapPtr(p, total)
			return nil, err
		}
	}
	base := unsafe.Add(p, head)
	if tail := total - head - size; tail > 0 {
		if err := unix.MunmapPtr(unsafe.Add(base, size), tail); err != nil {
			unix.MunmapPtr(base, size+tail)
			return nil, err
		}
	}
	return base, nil
}

func unmap(base unsafe.Pointer, size uintptr) error { return unix.MunmapPtr(base, size) }

func adviseHuge(b []byte) error { return unix.Madvise(b, unix.MADV_HUGEPAGE) }

func populate(b []byte) {
	if unix.Madvise(b, unix.MADV_POPULATE_WRITE) == nil {
		return
	}
	page := os.Getpagesize()
	for i := 0; i < len(b); i += page {
		b[i] = 0
	}
}
