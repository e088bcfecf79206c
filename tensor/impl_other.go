//go:build !(amd64 || arm64) || purego

package tensor

var archImpls []*Impl
