//go:build !(amd64 || arm64) || purego

package probe

func fma(impl string, iters int) float64 { return fmaGo(iters) }

func read(impl string, buf []byte) { readGo(buf) }
