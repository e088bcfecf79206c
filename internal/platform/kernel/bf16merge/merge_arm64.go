//go:build !purego

package bf16merge

import "github.com/k3go/k3/internal/platform/cpu"

//go:generate sh -c "cd ../../../asmgen && go run ./neon -out ../platform/kernel/bf16merge/merge_arm64.s -stubs ../platform/kernel/bf16merge/merge_stub_arm64.go -pkg bf16merge"

var archImpls = []*Impl{{Name: cpu.NEON, merge: neonMerge}}

// neonMerge runs the NEON kernel on the largest multiple of 32 words and
// the generic code on the rest.
func neonMerge(dst, exp, sm []byte) {
	n := len(exp) &^ 31
	if n > 0 {
		_, _ = dst[2*n-1], sm[n-1] // the kernel reads and writes this far
		mergeNEON(&dst[0], &exp[0], &sm[0], n)
	}
	mergeGeneric(dst[2*n:], exp[n:], sm[n:])
}
