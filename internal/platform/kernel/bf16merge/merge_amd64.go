//go:build !purego

package bf16merge

import "github.com/k3go/k3/internal/platform/cpu"

var archImpls = []*Impl{
	{Name: cpu.AVX2, merge: asmMerge(mergeAVX2, 64)},
	{Name: cpu.AVX512, merge: asmMerge(mergeAVX512, 128)},
}

// asmMerge runs kernel k (which handles multiples of step words) on the
// largest such prefix and the generic code on the rest.
func asmMerge(k func(dst, exp, sm *byte, n int), step int) func(dst, exp, sm []byte) {
	return func(dst, exp, sm []byte) {
		n := len(exp) &^ (step - 1)
		if n > 0 {
			_, _ = dst[2*n-1], sm[n-1] // the kernel reads and writes this far
			k(&dst[0], &exp[0], &sm[0], n)
		}
		mergeGeneric(dst[2*n:], exp[n:], sm[n:])
	}
}
