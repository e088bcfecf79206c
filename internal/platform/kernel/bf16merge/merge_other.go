//go:build !(amd64 || arm64) || purego

package bf16merge

var archImpls []*Impl
