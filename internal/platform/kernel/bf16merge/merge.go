// Package bf16merge rebuilds the 16-bit words of a compressed trunk block
// from its two byte streams: the words' exponent bytes (bits 14..7) and
// their sign and mantissa bits packed into one byte (sign in bit 7,
// mantissa in bits 6..0). It is the second half of every block decode, so
// it has SIMD kernels chosen at start-up through the kernel registry
// (K3_KERNELS=generic forces the pure-Go one).
package bf16merge

import (
	"encoding/binary"
	"fmt"

	"github.com/k3go/k3/internal/platform/kernel"
)

// Impl is one implementation of the merge.
type Impl struct {
	Name      string
	Available bool
	// merge trusts its arguments: len(sm) == len(exp), len(dst) == 2*len(exp).
	merge func(dst, exp, sm []byte)
}

var genericImpl = Impl{Name: "generic", Available: true, merge: mergeGeneric}

var reg = kernel.New("bf16merge", &genericImpl)

func init() {
	reg.Setup(archImpls, func(i *Impl) string { return i.Name }, func(i *Impl, ok bool) { i.Available = ok }, selfCheck)
}

// Merge writes word i of dst (little-endian) from exp[i] and sm[i] for
// every i < len(exp): (sm&0x80)<<8 | exp<<7 | sm&0x7f. It panics if sm is
// shorter than exp or dst shorter than 2*len(exp) (a caller's bug: the
// block decoder sizes all three from the block's length).
func Merge(dst, exp, sm []byte) {
	n := len(exp)
	reg.Current().merge(dst[:2*n], exp, sm[:n])
}

// Implementations lists the implementations this CPU can run, slowest
// first ("generic", then "avx2", "avx512" or "neon").
func Implementations() []string { return reg.Names() }

// Implementation returns the name of the selected implementation.
func Implementation() string { return reg.CurrentName() }

// SetImplementation selects an implementation by name for the whole process
// and returns a function that restores the previous one (for tests and
// benchmarks; never while a decode runs).
func SetImplementation(name string) (restore func(), err error) { return reg.Set(name) }

// mergeGeneric merges eight words per step: the bytes are spread into the
// 16-bit lanes of a uint64 and combined with lane-wise masks and shifts (no
// lane overflows: an exponent shifted by 7 stays under bit 15).
func mergeGeneric(dst, exp, sm []byte) {
	for len(exp) >= 8 && len(sm) >= 8 && len(dst) >= 16 {
		e := binary.LittleEndian.Uint64(exp)
		m := binary.LittleEndian.Uint64(sm)
		binary.LittleEndian.PutUint64(dst, mergeLanes(uint32(e), uint32(m)))
		binary.LittleEndian.PutUint64(dst[8:], mergeLanes(uint32(e>>32), uint32(m>>32)))
		exp, sm, dst = exp[8:], sm[8:], dst[16:]
	}
	for i := range exp {
		binary.LittleEndian.PutUint16(dst[2*i:], Word(exp[i], sm[i]))
	}
}

// Word is one merged word: the definition every implementation must match.
func Word(exp, sm byte) uint16 {
	e, m := uint16(exp), uint16(sm)
	return (m&0x80)<<8 | e<<7 | m&0x7f
}

// mergeLanes combines four exponent and four sign+mantissa bytes into four
// little-endian 16-bit words.
func mergeLanes(e4, m4 uint32) uint64 {
	e, m := spread16(e4), spread16(m4)
	return (m&0x0080008000800080)<<8 | e<<7 | m&0x007f007f007f007f
}

// spread16 moves byte k of v to the low byte of 16-bit lane k.
func spread16(v uint32) uint64 {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	return (x | x<<8) & 0x00ff00ff00ff00ff
}

// selfCheck compares an implementation with Word on every (exp, sm) pair,
// at every start offset and length around the kernels' steps, before it can
// be selected.
func selfCheck(impl *Impl) error {
	const n = 1 << 16
	exp, sm := make([]byte, n+64), make([]byte, n+64)
	for i := range n {
		exp[i], sm[i] = byte(i>>8), byte(i)
	}
	dst := make([]byte, 2*len(exp))
	for _, c := range [][2]int{{0, n}, {1, 300}, {3, 129}, {5, 64}, {7, 255}, {0, 0}, {2, 7}} {
		off, l := c[0], c[1]
		e, s := exp[off:off+l], sm[(off*7)%64:(off*7)%64+l]
		d := dst[off : off+2*l]
		clear(dst)
		impl.merge(d, e, s)
		for i := range l {
			if got, want := binary.LittleEndian.Uint16(d[2*i:]), Word(e[i], s[i]); got != want {
				return fmt.Errorf("offset %d length %d word %d: %#04x, want %#04x", off, l, i, got, want)
			}
		}
		for i := off + 2*l; i < len(dst); i++ {
			if dst[i] != 0 {
				return fmt.Errorf("offset %d length %d: wrote byte %d past the end", off, l, i-off-2*l)
			}
		}
	}
	return nil
}
