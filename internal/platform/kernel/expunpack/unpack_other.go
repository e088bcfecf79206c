//go:build purego || !amd64

package expunpack

func archImpls() []*Impl { return nil }
