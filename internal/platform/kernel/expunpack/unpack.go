// Package expunpack decodes the fixed-width exponent code of a compressed
// trunk block (model/compress_fixed.go): 3-bit codes, least significant bit
// first, each an index into a 7-entry table of exponent bytes, code 7 an
// escape whose byte is the next one of an escape list. It is the first half
// of a fixed-mode block decode; the word merge (internal/platform/kernel/bf16merge) is the
// second. Its AVX-512 VBMI kernel decodes 64 codes per step; the model
// package's table-driven Go decoder does everything else, so this package
// only offers the whole steps a kernel can take, and reports when it has
// none ("generic").
package expunpack

import (
	"fmt"
	"math/rand/v2"

	"github.com/k3go/k3/internal/platform/kernel"
)

// Group is the number of codes one step decodes; a step reads GroupBytes
// code bytes and needs Slack more after them to be readable.
const (
	Group      = 64
	GroupBytes = 3 * Group / 8
	Slack      = 8
)

// Impl is one implementation.
type Impl struct {
	Name      string
	Available bool
	// unpack trusts its arguments: groups steps fit exp and codes (with
	// Slack), escs holds nesc bytes.
	unpack func(exp, codes []byte, groups int, table *[8]byte, escs []byte) (done, used int)
}

var genericImpl = Impl{Name: "generic", Available: true, unpack: unpackGeneric}

var reg = kernel.New("expunpack", &genericImpl)

func init() {
	reg.Setup(archImpls(), func(i *Impl) string { return i.Name }, func(i *Impl, ok bool) { i.Available = ok }, selfCheck)
}

// Fast reports whether a SIMD kernel is selected: without one, the caller's
// own decoder is faster than this package's reference loop.
func Fast() bool { return reg.CurrentName() != genericImpl.Name }

// Implementation returns the selected implementation's name.
func Implementation() string { return reg.CurrentName() }

// Implementations lists the implementations this CPU can run.
func Implementations() []string { return reg.Names() }

// SetImplementation selects an implementation by name for the whole process
// and returns a function that restores the previous one (tests and
// benchmarks only).
func SetImplementation(name string) (restore func(), err error) { return reg.Set(name) }

// Unpack3 decodes as many whole steps of Group codes from the start of
// codes into exp as fit both (a step needs Slack readable code bytes after
// its own) and whose escapes escs still holds: code c < 7 is table[c], code
// 7 the next escape byte. It returns the codes decoded (a multiple of
// Group) and the escapes used; the caller decodes the rest, from exp[done:],
// codes[done*3/8:] and escs[used:].
func Unpack3(exp, codes []byte, table *[8]byte, escs []byte) (done, used int) {
	groups := min(len(exp)/Group, max(0, (len(codes)-Slack)/GroupBytes))
	if groups == 0 {
		return 0, 0
	}
	g, u := reg.Current().unpack(exp, codes, groups, table, escs)
	return g * Group, u
}

// Pack3 writes 3-bit codes (each < 8) least significant bit first: the
// stream Unpack3 reads (the encoder's layout, model/compress_fixed.go).
func Pack3(cs []byte) []byte {
	out := make([]byte, (3*len(cs)+7)/8)
	for i, c := range cs {
		bit := 3 * i
		out[bit/8] |= c << (bit % 8)
		if bit%8 > 5 {
			out[bit/8+1] |= c >> (8 - bit%8)
		}
	}
	return out
}

// code returns code i of a 3-bit stream.
func code(codes []byte, i int) byte {
	bit := 3 * i
	x := uint(codes[bit/8])
	if bit/8+1 < len(codes) {
		x |= uint(codes[bit/8+1]) << 8
	}
	return byte(x >> (bit % 8) & 7)
}

// unpackGeneric is the reference: one code at a time, a step at a time.
func unpackGeneric(exp, codes []byte, groups int, table *[8]byte, escs []byte) (done, used int) {
	for ; done < groups; done++ {
		base := done * Group
		need := 0
		for i := range Group {
			if code(codes, base+i) == 7 {
				need++
			}
		}
		if need > len(escs)-used {
			break
		}
		for i := range Group {
			if c := code(codes, base+i); c == 7 {
				exp[base+i] = escs[used]
				used++
			} else {
				exp[base+i] = table[c]
			}
		}
	}
	return done, used
}

// selfCheck compares an implementation with the reference on random codes
// (one in six an escape), with escapes to spare and one short, before it
// can be selected; the bytes past the steps must stay untouched.
func selfCheck(impl *Impl) error {
	rng := rand.New(rand.NewPCG(7, 8))
	table := &[8]byte{0x70, 0x71, 0x6f, 0x72, 0x6e, 0x73, 0x6d, 0xff}
	for _, groups := range []int{1, 2, 7, 64} {
		cs := make([]byte, groups*Group)
		for i := range cs {
			if cs[i] = byte(rng.IntN(7)); rng.IntN(6) == 0 {
				cs[i] = 7
			}
		}
		codes := append(Pack3(cs), make([]byte, Slack)...)
		escs := make([]byte, groups*Group)
		for i := range escs {
			escs[i] = byte(rng.Uint32())
		}
		for _, short := range []bool{false, true} {
			e := escs
			if short {
				_, all := unpackGeneric(make([]byte, groups*Group), codes, groups, table, escs)
				e = escs[:max(0, all-1)]
			}
			want, got := make([]byte, groups*Group+Group), make([]byte, groups*Group+Group)
			for i := range got {
				want[i], got[i] = 0xA5, 0xA5
			}
			wd, wu := unpackGeneric(want, codes, groups, table, e)
			gd, gu := impl.unpack(got, codes, groups, table, e)
			if gd != wd || gu != wu {
				return fmt.Errorf("%d steps (escapes short %v): %d steps and %d escapes, want %d and %d", groups, short, gd, gu, wd, wu)
			}
			for i := range got {
				if got[i] != want[i] {
					return fmt.Errorf("%d steps (escapes short %v): byte %d = %#02x, want %#02x", groups, short, i, got[i], want[i])
				}
			}
		}
	}
	return nil
}
