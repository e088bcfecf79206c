package prefix

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// specHash is the key derivation written out from the package doc, with
// its own encoding code, as the reference the Hasher must equal.
func specHash(parts ...any) Key {
	var b bytes.Buffer
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			b.WriteString(p)
		case Key:
			b.Write(p[:])
		case []int:
			for _, t := range p {
				binary.Write(&b, binary.LittleEndian, int64(t))
			}
		case uint32, uint64:
			binary.Write(&b, binary.LittleEndian, p)
		default:
			panic("specHash: unexpected part")
		}
	}
	return sha256.Sum256(b.Bytes())
}

func randTokens(r *rand.Rand, n, vocab int) []int {
	t := make([]int, n)
	for i := range t {
		t[i] = r.IntN(vocab)
	}
	return t
}

func mustHasher(t testing.TB, fp string, b int) *Hasher {
	t.Helper()
	x, err := NewHasher(fp, b)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestChainMatchesSpec(t *testing.T) {
	const fp, b = "model-abc", 4
	x := mustHasher(t, fp, b)
	seed := specHash("k3/prefix/seed\x00", uint32(FormatVersion), uint32(b), uint64(len(fp)), fp)
	if x.Seed() != seed {
		t.Fatalf("seed %s, spec %s", x.Seed(), seed)
	}
	tokens := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, -1, 1 << 40}
	p := x.Prompt(tokens)
	if p.Blocks() != 2 || p.Len() != 11 {
		t.Fatalf("Blocks %d Len %d, want 2 and 11", p.Blocks(), p.Len())
	}
	h1 := specHash("k3/prefix/block\x00", seed, tokens[0:4])
	h2 := specHash("k3/prefix/block\x00", h1, tokens[4:8])
	if p.Chain(0) != seed || p.Chain(1) != h1 || p.Chain(2) != h2 || p.BlockKey(0) != h1 || p.BlockKey(1) != h2 {
		t.Fatal("chain differs from the spec")
	}
	for pos, want := range map[int]Key{
		0:  specHash("k3/prefix/state\x00", seed),
		3:  specHash("k3/prefix/state\x00", seed, tokens[0:3]),
		4:  specHash("k3/prefix/state\x00", h1),
		10: specHash("k3/prefix/state\x00", h2, tokens[8:10]),
		11: specHash("k3/prefix/state\x00", h2, tokens[8:11]),
	} {
		if got := p.StateKey(pos); got != want {
			t.Errorf("StateKey(%d) = %s, spec %s", pos, got, want)
		}
	}
	k, m := p.StateMeta(10)
	if k != p.StateKey(10) || m.Kind != KindState || m.Pos != 10 || m.Tail != 2 || m.Anchor != h2 {
		t.Errorf("StateMeta(10) = %+v", m)
	}
	k, m = p.BlockMeta(1)
	if k != h2 || m.Kind != KindBlock || m.Pos != 8 || m.Tail != 0 || m.Anchor != h1 {
		t.Errorf("BlockMeta(1) = %+v", m)
	}
}

func TestKeysSeparated(t *testing.T) {
	x := mustHasher(t, "fp", 8)
	p := x.Prompt(randTokens(rand.New(rand.NewPCG(1, 2)), 16, 100))
	// A state with an empty tail hashes the same anchor as the next block
	// key over no tokens: the tags must keep them apart.
	seen := map[Key]string{}
	for i := 0; i <= p.Blocks(); i++ {
		seen[p.Chain(i)] = "chain"
	}
	for pos := 0; pos <= p.Len(); pos++ {
		k := p.StateKey(pos)
		if what, dup := seen[k]; dup {
			t.Fatalf("state key at %d equals a %s key", pos, what)
		}
		seen[k] = "state"
	}
	// Another fingerprint, block size: other seeds.
	seeds := map[Key]bool{}
	for _, fp := range []string{"fp", "fp2", "f"} {
		for _, b := range []int{1, 8, 512} {
			seeds[mustHasher(t, fp, b).Seed()] = true
		}
	}
	if len(seeds) != 9 {
		t.Fatalf("%d distinct seeds of 9", len(seeds))
	}
	// Tokens are not truncated: ids that agree in their low 32 bits differ.
	a, b := x.Prompt([]int{1, 0, 0, 0, 0, 0, 0, 0}), x.Prompt([]int{1 + 1<<32, 0, 0, 0, 0, 0, 0, 0})
	if a.BlockKey(0) == b.BlockKey(0) {
		t.Fatal("token ids collide")
	}
}

func TestAppendEqualsWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := mustHasher(t, "fp", 5)
	for range 50 {
		tokens := randTokens(r, r.IntN(40), 1000)
		whole := x.Prompt(tokens)
		p := x.Prompt(nil)
		for rest := tokens; len(rest) > 0; {
			n := r.IntN(len(rest) + 1)
			p.Append(rest[:n]...)
			rest = rest[n:]
		}
		if p.Len() != whole.Len() || p.Blocks() != whole.Blocks() {
			t.Fatalf("lengths differ")
		}
		for i := 0; i <= p.Blocks(); i++ {
			if p.Chain(i) != whole.Chain(i) {
				t.Fatalf("chain %d differs", i)
			}
		}
		for pos := 0; pos <= p.Len(); pos++ {
			if p.StateKey(pos) != whole.StateKey(pos) {
				t.Fatalf("state key %d differs", pos)
			}
		}
	}
	// The prompt owns its tokens.
	tokens := []int{1, 2, 3, 4, 5, 6}
	p := x.Prompt(tokens)
	k := p.StateKey(6)
	tokens[5] = 99
	if p.StateKey(6) != k {
		t.Fatal("Prompt kept the caller's slice")
	}
}

func TestNewHasherErrors(t *testing.T) {
	for _, c := range []struct {
		fp string
		b  int
	}{{"", 8}, {"fp", 0}, {"fp", -1}, {"fp", MaxBlockSize + 1}} {
		if _, err := NewHasher(c.fp, c.b); !errors.Is(err, ErrBadOptions) {
			t.Errorf("NewHasher(%q, %d) = %v, want ErrBadOptions", c.fp, c.b, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	k := specHash("x")
	got, err := ParseKey(k.String())
	if err != nil || got != k {
		t.Fatalf("ParseKey(String()) = %s, %v", got, err)
	}
	for _, s := range []string{"", "00", k.String()[:63] + "g", k.String() + "00"} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
}
