package bf16merge

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/cpu"
)

const guard = 64 // bytes of sentinel on each side of dst
const sentinel = 0xA5

// eachImpl runs f with every implementation this CPU can run selected.
func eachImpl(t testing.TB, f func(name string)) {
	t.Helper()
	for _, name := range Implementations() {
		restore, err := SetImplementation(name)
		if err != nil {
			t.Fatal(err)
		}
		f(name)
		restore()
	}
}

// check merges exp and sm into a guarded dst starting at byte offset off
// and compares every word with Word.
func check(t testing.TB, name string, exp, sm []byte, off int) {
	t.Helper()
	n := len(exp)
	buf := make([]byte, 2*guard+2*n+off)
	for i := range buf {
		buf[i] = sentinel
	}
	dst := buf[guard+off : guard+off+2*n : guard+off+2*n]
	Merge(dst, exp, sm)
	for i := range n {
		if got, want := binary.LittleEndian.Uint16(dst[2*i:]), Word(exp[i], sm[i]); got != want {
			t.Fatalf("%s: %d words, dst offset %d: word %d = %#04x, want %#04x", name, n, off, i, got, want)
		}
	}
	for i, b := range buf {
		if (i < guard+off || i >= guard+off+2*n) && b != sentinel {
			t.Fatalf("%s: %d words, dst offset %d: guard byte %d overwritten", name, n, off, i-guard-off)
		}
	}
}

func TestMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	back := make([]byte, 1<<18+16)
	for i := range back {
		back[i] = byte(r.Uint32())
	}
	lengths := []int{0, 1, 2, 7, 8, 9, 15, 31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257, 1000, 1 << 17}
	for range 20 {
		lengths = append(lengths, r.IntN(3000))
	}
	eachImpl(t, func(name string) {
		for _, n := range lengths {
			for _, off := range []int{0, 1, 3} {
				// exp and sm misaligned against each other and against dst.
				check(t, name, back[off:off+n], back[1<<17+5-off:1<<17+5-off+n], off)
			}
		}
		// Adversarial bytes: all ones, all zeros, alternating.
		for _, pat := range [][2]byte{{0xff, 0xff}, {0, 0}, {0xff, 0}, {0, 0xff}, {0x80, 0x7f}, {0x7f, 0x80}} {
			exp, sm := make([]byte, 300), make([]byte, 300)
			for i := range exp {
				exp[i], sm[i] = pat[0]^byte(i&1)*0xff, pat[1]
			}
			check(t, name, exp, sm, 1)
		}
	})
}

// Every pair of bytes, so every word, through every implementation.
func TestMergeAllWords(t *testing.T) {
	exp, sm := make([]byte, 1<<16), make([]byte, 1<<16)
	for i := range exp {
		exp[i], sm[i] = byte(i>>8), byte(i)
	}
	eachImpl(t, func(name string) { check(t, name, exp, sm, 0) })
}

// Word is the inverse of the split the encoder does.
func TestWordInvertsSplit(t *testing.T) {
	for w := range 1 << 16 {
		exp, sm := byte(w>>7), byte(w>>8)&0x80|byte(w)&0x7f
		if got := Word(exp, sm); got != uint16(w) {
			t.Fatalf("word %#04x: merged back to %#04x", w, got)
		}
	}
}

// The self-check rejects a kernel that is wrong in one word or writes past
// the end, so a broken kernel cannot be selected.
func TestSelfCheckRejects(t *testing.T) {
	if err := selfCheck(&genericImpl); err != nil {
		t.Fatalf("generic fails its own check: %v", err)
	}
	wrong := &Impl{Name: "wrong", merge: func(dst, exp, sm []byte) {
		mergeGeneric(dst, exp, sm)
		if len(exp) > 100 {
			dst[150] ^= 1
		}
	}}
	over := &Impl{Name: "over", merge: func(dst, exp, sm []byte) {
		mergeGeneric(dst, exp, sm)
		if cap(dst) > len(dst) {
			dst[:len(dst)+1][len(dst)] = 1
		}
	}}
	for _, impl := range []*Impl{wrong, over} {
		if err := selfCheck(impl); err == nil {
			t.Errorf("%s: self-check passed", impl.Name)
		}
	}
}

func FuzzMerge(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0xff}, []byte{0x80, 0x7f, 0, 0xff}, uint8(0))
	f.Add(make([]byte, 200), make([]byte, 200), uint8(3))
	f.Fuzz(func(t *testing.T, exp, sm []byte, off uint8) {
		n := min(len(exp), len(sm))
		eachImpl(t, func(name string) { check(t, name, exp[:n], sm[:n], int(off%8)) })
	})
}

// BenchmarkMerge merges one block's 128 Ki words, in cache.
func BenchmarkMerge(b *testing.B) {
	exp, sm := make([]byte, 1<<17), make([]byte, 1<<17)
	for i := range exp {
		exp[i], sm[i] = byte(i*7), byte(i*13)
	}
	dst := make([]byte, 1<<18)
	for _, name := range Implementations() {
		b.Run(name, func(b *testing.B) {
			restore, err := SetImplementation(name)
			if err != nil {
				b.Fatal(err)
			}
			defer restore()
			b.SetBytes(int64(len(dst)))
			for b.Loop() {
				Merge(dst, exp, sm)
			}
		})
	}
}

// TestSelected fails when the kernels this machine should run (AVX-512,
// AVX2 or NEON) were not selected, for example after failing their
// self-check: the other tests only run the implementations that passed it.
func TestSelected(t *testing.T) {
	if got, want := Implementation(), cpu.Expected(); got != want {
		t.Errorf("selected %q, want %q (available: %v)", got, want, Implementations())
	}
}
