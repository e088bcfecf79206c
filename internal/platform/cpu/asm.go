//go:build (amd64 || arm64) && !purego

package cpu

// asm reports whether assembly kernels are compiled in.
const asm = true
