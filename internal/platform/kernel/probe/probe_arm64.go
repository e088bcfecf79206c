//go:build !purego

package probe

import "github.com/k3go/k3/internal/platform/kernel/gemm"

func fma(impl string, iters int) float64 {
	if impl != "neon" {
		return fmaGo(iters)
	}
	return gemm.NEONFMAPeak(iters)
}

func read(impl string, buf []byte) {
	if impl != "neon" {
		readGo(buf)
		return
	}
	gemm.NEONRead(buf)
}
