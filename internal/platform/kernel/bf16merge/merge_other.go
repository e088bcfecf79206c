//go:build !amd64 || purego

package bf16merge

var archImpls []*Impl
