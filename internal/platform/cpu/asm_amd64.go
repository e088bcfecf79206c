//go:build !purego

package cpu

// asm reports whether assembly kernels are compiled in.
const asm = true
