//go:build !amd64 || purego

package tensor

var archImpls []*Impl
