//go:build !(amd64 || arm64) || purego

package quant

var archImpls []*Impl
