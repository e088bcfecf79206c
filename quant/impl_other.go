//go:build !amd64 || purego

package quant

var archImpls []*Impl
