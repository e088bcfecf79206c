package iox

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// HugePageSize is the alignment of buffers allocated with
// [BufferOptions.HugePages] (the x86-64 and arm64 transparent huge page).
const HugePageSize = 2 << 20

// BufferOptions configures [AllocAligned]. The zero value gives a
// page-aligned buffer whose pages are charged to RSS only when touched.
type BufferOptions struct {
	// HugePages aligns the buffer to 2 MiB and advises MADV_HUGEPAGE, so the
	// kernel can back it with transparent huge pages: fewer TLB misses and,
	// for O_DIRECT, far fewer page pins per read (a 2.3 GB trunk layer is
	// ~570k 4 KiB pages). The length is rounded up to 2 MiB. Use it for
	// every read arena: on the development VM, O_DIRECT reads of 8 MiB
	// chunks into pre-faulted 4 KiB pages reached 0.6–1.0 GB/s, into
	// pre-faulted huge pages 1.9–2.2 GB/s. It needs transparent huge pages
	// in "madvise" or "always" mode; see HugePageErr.
	HugePages bool
	// Populate faults every page in at allocation (MADV_POPULATE_WRITE, or a
	// touch loop where that is unavailable), so RSS is charged now rather
	// than during the first reads, and the first O_DIRECT read into the
	// buffer does not pay for the faults (zeroing a huge page per 2 MiB).
	Populate bool
}

// Buffer is memory outside the Go heap (an anonymous mapping on Linux),
// aligned to at least [Align]. It is not scanned or moved by the garbage
// collector, counts in RSS only once touched, and goes back to the OS at
// [Buffer.Free], deterministically, which a hard RAM budget needs.
//
// The slice from [Buffer.Bytes] must not be used after Free: that is a
// use-after-free outside the Go heap (a crash at best). In particular, do
// not free a buffer that a [Reader] request still targets; wait for
// [Future.Released].
type Buffer struct {
	b       []byte         // the usable bytes, len n
	base    unsafe.Pointer // the mapping (nil for a heap fallback or n == 0)
	mapped  uintptr        // bytes mapped and accounted
	freed   atomic.Bool
	huge    bool
	hugeErr error
}

var (
	allocatedBytes atomic.Int64
	liveBuffers    atomic.Int64
)

// AllocatedBytes returns the bytes currently held by buffers from
// [AllocAligned] (mapped lengths, rounded to the page or huge page), for RAM
// budget accounting. Mapped is not resident: see [BufferOptions.Populate].
func AllocatedBytes() int64 { return allocatedBytes.Load() }

// LiveBuffers returns the number of buffers allocated and not yet freed.
func LiveBuffers() int64 { return liveBuffers.Load() }

// AllocAligned returns a zeroed buffer of n bytes aligned to [Align] (to
// [HugePageSize] with opts.HugePages), outside the Go heap.
func AllocAligned(n int, opts BufferOptions) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("iox: AllocAligned(%d): negative size", n)
	}
	if n == 0 {
		return &Buffer{b: []byte{}}, nil
	}
	align := uintptr(Align)
	if opts.HugePages {
		align = HugePageSize
	}
	size := (uintptr(n) + align - 1) &^ (align - 1)
	base, err := mapAligned(size, align)
	if err != nil {
		return nil, fmt.Errorf("iox: AllocAligned(%d): %w", n, err)
	}
	buf := &Buffer{b: unsafe.Slice((*byte)(base), size)[:n], base: base, mapped: size}
	if opts.HugePages {
		buf.huge = true
		buf.hugeErr = adviseHuge(buf.b[:size])
	}
	if opts.Populate {
		populate(buf.b[:size])
	}
	allocatedBytes.Add(int64(size))
	liveBuffers.Add(1)
	return buf, nil
}

// Bytes returns the buffer's memory: len n as allocated, cap the mapped
// length (n rounded up to the page or huge page). It is nil after Free.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the usable length.
func (b *Buffer) Len() int { return len(b.b) }

// Mapped returns the bytes mapped for the buffer (its length rounded up to
// the page or huge page), the amount counted by [AllocatedBytes].
func (b *Buffer) Mapped() int64 { return int64(b.mapped) }

// HugePageErr reports why MADV_HUGEPAGE was refused for a buffer allocated
// with HugePages (nil if it was accepted, or not asked for).
func (b *Buffer) HugePageErr() error { return b.hugeErr }

// Free unmaps the buffer. It is idempotent; it must not run concurrently
// with any use of the memory, including a read in flight into it.
func (b *Buffer) Free() error {
	if b == nil || !b.freed.CompareAndSwap(false, true) {
		return nil
	}
	b.b = nil
	if b.mapped == 0 {
		return nil
	}
	allocatedBytes.Add(-int64(b.mapped))
	liveBuffers.Add(-1)
	if err := unmap(b.base, b.mapped); err != nil {
		return fmt.Errorf("iox: Buffer.Free: %w", err)
	}
	return nil
}
