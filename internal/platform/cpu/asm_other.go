//go:build !(amd64 || arm64) || purego

package cpu

const asm = false
