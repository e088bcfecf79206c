package expunpack

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	k3cpu "github.com/k3go/k3/internal/platform/cpu"
)

// each runs f once per implementation this CPU has.
func each(t *testing.T, f func(t *testing.T)) {
	for _, name := range Implementations() {
		t.Run(name, func(t *testing.T) {
			restore, err := SetImplementation(name)
			if err != nil {
				t.Fatal(err)
			}
			defer restore()
			f(t)
		})
	}
}

// check decodes codes with Unpack3 at an odd offset in a sentinel-filled
// buffer and compares every byte with the reference, the sentinels after
// the decoded steps included.
func check(t *testing.T, cs []byte, escs []byte, table *[8]byte, codeSlack int, off int) {
	t.Helper()
	codes := append(Pack3(cs), make([]byte, codeSlack)...)
	// Misalign the code stream and the escapes too.
	codes = append(bytes.Repeat([]byte{0xEE}, off), codes...)[off:]
	escs = append(bytes.Repeat([]byte{0xDD}, off), escs...)[off:]
	n := len(cs)
	buf := bytes.Repeat([]byte{0xA5}, n+off+Group)
	got := buf[off : off+n]
	done, used := Unpack3(got, codes, table, escs)
	groups := min(n/Group, max(0, (len(codes)-Slack)/GroupBytes))
	want := bytes.Repeat([]byte{0xA5}, n+Group)
	wd, wu := unpackGeneric(want, codes, groups, table, escs)
	if done != wd*Group || used != wu {
		t.Fatalf("n %d slack %d off %d: %d codes, %d escapes; reference %d, %d", n, codeSlack, off, done, used, wd*Group, wu)
	}
	if !bytes.Equal(buf[off:off+n+Group], want) {
		for i := range want {
			if buf[off+i] != want[i] {
				t.Fatalf("n %d slack %d off %d: byte %d = %#02x, want %#02x", n, codeSlack, off, i, buf[off+i], want[i])
			}
		}
	}
	for i := range off {
		if buf[i] != 0xA5 {
			t.Fatalf("wrote byte %d before the output", i-off)
		}
	}
	// Every decoded code is right by definition, not only by the reference.
	e := 0
	for i := range done {
		w := table[cs[i]]
		if cs[i] == 7 {
			w = escs[e]
			e++
		}
		if got[i] != w {
			t.Fatalf("code %d (%d): %#02x, want %#02x", i, cs[i], got[i], w)
		}
	}
}

func TestUnpack3(t *testing.T) {
	table := &[8]byte{0x78, 0x79, 0x77, 0x7a, 0x76, 0x7b, 0x75, 0x00}
	rng := rand.New(rand.NewPCG(1, 2))
	codesOf := func(n int, esc float64) []byte {
		cs := make([]byte, n)
		for i := range cs {
			if rng.Float64() < esc {
				cs[i] = 7
			} else {
				cs[i] = byte(rng.IntN(7))
			}
		}
		return cs
	}
	escsFor := func(cs []byte, short int) []byte {
		n := 0
		for _, c := range cs {
			if c == 7 {
				n++
			}
		}
		e := make([]byte, max(0, n-short))
		for i := range e {
			e[i] = byte(rng.Uint32())
		}
		return e
	}
	each(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 640, 64 * 37, 131072} {
			for _, esc := range []float64{0, 0.06, 0.5, 1} {
				cs := codesOf(n, esc)
				for _, short := range []int{0, 1, 50} {
					for _, slack := range []int{0, 7, Slack} {
						check(t, cs, escsFor(cs, short), table, slack, (n+short+slack)%13)
					}
				}
			}
		}
	})
}

// TestUnpack3Selected: where the CPU has the kernel's features (and
// K3_KERNELS does not ask for less), the kernel is what runs.
func TestUnpack3Selected(t *testing.T) {
	t.Logf("implementations %v, selected %s", Implementations(), Implementation())
	if cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512VBMI2 && len(archImpls()) > 0 && k3cpu.Expected() == k3cpu.AVX512 && !Fast() {
		t.Errorf("the CPU has AVX-512 VBMI/VBMI2 but %s is selected", Implementation())
	}
}

func FuzzUnpack3(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xff}, 3*GroupBytes+Slack), []byte{1, 2, 3}, uint8(0))
	f.Add(bytes.Repeat([]byte{0x49, 0x92, 0x24}, 40), bytes.Repeat([]byte{9}, 200), uint8(5))
	f.Add([]byte{}, []byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, codes, escs []byte, off uint8) {
		table := &[8]byte{1, 2, 3, 4, 5, 6, 7, 8}
		n := len(codes) * 8 / 3
		want := make([]byte, n)
		got := make([]byte, n)
		groups := min(n/Group, max(0, (len(codes)-Slack)/GroupBytes))
		wd, wu := unpackGeneric(want, codes, groups, table, escs)
		d, u := Unpack3(got, codes, table, escs)
		if d != wd*Group || u != wu || !bytes.Equal(got, want) {
			t.Fatalf("%d codes: %d, %d against %d, %d", n, d, u, wd*Group, wu)
		}
	})
}

func BenchmarkUnpack3(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 131072 // one block's exponents
	cs := make([]byte, n)
	ne := 0
	for i := range cs {
		if cs[i] = byte(rng.IntN(7)); rng.IntN(16) == 0 {
			cs[i], ne = 7, ne+1
		}
	}
	codes := append(Pack3(cs), make([]byte, Slack)...)
	escs := make([]byte, ne)
	exp := make([]byte, n)
	table := &[8]byte{}
	for _, name := range Implementations() {
		b.Run(name, func(b *testing.B) {
			restore, _ := SetImplementation(name)
			defer restore()
			b.SetBytes(int64(n))
			for b.Loop() {
				Unpack3(exp, codes, table, escs)
			}
		})
	}
}
