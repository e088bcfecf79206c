//go:build !unix

package iox

// openNonblock: no non-blocking open outside Unix (FIFOs are refused by
// the stat before the open).
const openNonblock = 0
