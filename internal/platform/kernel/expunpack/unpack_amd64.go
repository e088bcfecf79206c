//go:build !purego

package expunpack

import (
	"golang.org/x/sys/cpu"

	k3cpu "github.com/k3go/k3/internal/platform/cpu"
)

// archImpls offers the AVX-512 kernel where the CPU has VBMI (VPERMB,
// VPMULTISHIFTQB) and VBMI2 (VPEXPANDB) besides AVX-512 F/BW: Ice Lake and
// later, Zen 4 and later. Elsewhere only the generic code runs (AVX2 has no
// byte permute across lanes or expand, so a kernel there would not beat the
// model's table decoder by enough to carry).
//
// K3_KERNELS=avx2 (or generic) keeps it off, as it keeps every other
// AVX-512 kernel off.
func archImpls() []*Impl {
	if !k3cpu.HasAVX512 || !cpu.X86.HasAVX512VBMI || !cpu.X86.HasAVX512VBMI2 || !cpu.X86.HasPOPCNT {
		return nil
	}
	if o := k3cpu.Override(); o == k3cpu.AVX2 || o == k3cpu.Generic {
		return nil
	}
	return []*Impl{{Name: k3cpu.AVX512, unpack: unpackAVX512}}
}

var none byte // a valid address for an empty escape list (the kernel reads none of it)

func unpackAVX512(exp, codes []byte, groups int, table *[8]byte, escs []byte) (done, used int) {
	_, _ = exp[groups*Group-1], codes[groups*GroupBytes+Slack-1] // the kernel writes and reads this far
	e := &none
	if len(escs) > 0 {
		e = &escs[0]
	}
	return unpack3AVX512(&exp[0], &codes[0], groups, table, e, len(escs))
}
