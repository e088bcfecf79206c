package iox

import "unsafe"

// Align is the alignment iox uses for O_DIRECT file offsets, lengths and
// buffer addresses. 4096 satisfies every common device and file system
// (logical blocks are 512 or 4096 bytes); a file system that needs more is
// detected at open (Linux statx) and read buffered.
const Align = 4096

// AlignDown rounds x down to a multiple of [Align].
func AlignDown(x int64) int64 { return x &^ (Align - 1) }

// AlignUp rounds x up to a multiple of [Align].
func AlignUp(x int64) int64 { return (x + Align - 1) &^ (Align - 1) }

// Window returns the aligned read window for the payload [off, off+n): the
// window starts at start = off &^ 4095, has length = roundup(off+n, 4096) −
// start bytes, and the payload sits at pad = off − start inside it. For n == 0
// the window is empty.
//
// A buffer of len ≥ length whose address is [Align]-aligned can be the
// destination of an O_DIRECT read of the window; the payload is then
// buf[pad : pad+n]. Sizes of checkpoint tensors are 4096-multiples only by
// coincidence and their offsets generally are not, so length may exceed n by
// up to 8190 bytes.
func Window(off int64, n int) (start int64, length int, pad int) {
	start = AlignDown(off)
	pad = int(off - start)
	if n <= 0 {
		return start, 0, pad
	}
	return start, int(AlignUp(off+int64(n)) - start), pad
}

// WindowLen is the length of [Window](off, n): the minimum len(Dst) of a
// [Request] for that payload.
func WindowLen(off int64, n int) int {
	_, l, _ := Window(off, n)
	return l
}

// Payload returns where the payload [off, off+n) lies in a buffer that holds
// its window (or that was the Dst of a [Request] for it): buf[pad : pad+n].
// It panics if buf is too short, like any slice expression.
func Payload(buf []byte, off int64, n int) []byte {
	pad := int(off & (Align - 1))
	return buf[pad : pad+n : pad+n]
}

// IsAligned reports whether b's first byte is [Align]-aligned in memory. An
// empty slice counts as aligned.
func IsAligned(b []byte) bool {
	if cap(b) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(Align-1) == 0
}
