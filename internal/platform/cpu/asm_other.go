//go:build !amd64 || purego

package cpu

const asm = false
