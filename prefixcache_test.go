package k3_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/k3go/k3"
)

// coldLogits returns the last position's logits of ids on a model without
// a prefix cache: the reference every restore must equal, bit for bit.
func coldLogits(t *testing.T, name string, ids []int) []float32 {
	t.Helper()
	m, _ := openOracle(t, name, k3.Options{MaxContext: 256})
	l, err := m.NewSession().Step(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), l...)
}

// mustSameBits fails the test unless got equals want bit for bit.
func mustSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if i := firstBitDiff(got, want); i >= 0 {
		if i < min(len(got), len(want)) {
			t.Fatalf("%s: logit %d = %v, cold prefill %v", what, i, got[i], want[i])
		}
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
}

// randomIDs returns n token ids of a vocabulary of v, from seed.
func randomIDs(seed uint64, n, v int) []int {
	rng := rand.New(rand.NewPCG(seed, 3))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(v)
	}
	return ids
}

// stepFresh runs ids through a new session and returns its last logits
// (a copy) and how many tokens the prefix cache restored.
func stepFresh(t *testing.T, m *k3.Model, ids []int) ([]float32, int) {
	t.Helper()
	s := m.NewSession()
	defer s.Close()
	l, err := s.Step(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), l...), s.CachedTokens()
}

// TestPrefixCacheExact checks that logits after a restore equal, byte for
// byte, those of a cold prefill of the same tokens: for the RAM tier and
// the disk tier, without a budget and streaming at a small one, with wide
// and narrow passes (MaxBatch 256 and 5); for a prompt that extends an
// earlier one (the next turn), one shorter than a block, the same prompt
// again (restored whole with its logits: no pass at all), and one whose
// text changes partway (everything up to the last checkpoint before the
// change is reused, and the state where it branched is kept, so the next
// prompt that branches there reuses every block before it).
func TestPrefixCacheExact(t *testing.T) {
	for _, name := range oracles {
		V := 256 // the oracles' vocabularies are larger; stay inside them
		turn1 := randomIDs(1, 37, V)
		turn2 := append(append([]int(nil), turn1...), randomIDs(2, 29, V)...)
		changed := append([]int(nil), turn2...)
		changed[60] = (changed[60] + 1) % V
		branched := append([]int(nil), turn2...)
		branched[60] = (branched[60] + 2) % V
		want1, want2, wantChanged := coldLogits(t, name, turn1), coldLogits(t, name, turn2), coldLogits(t, name, changed)
		wantBranched := coldLogits(t, name, branched)
		short := turn1[:3]
		wantShort := coldLogits(t, name, short)
		for _, c := range []struct {
			name  string
			opts  k3.Options
			cache k3.PrefixCacheOptions
		}{
			{"ram", k3.Options{}, k3.PrefixCacheOptions{RAMBytes: 64 << 20, DiskBytes: -1}},
			{"disk", k3.Options{}, k3.PrefixCacheOptions{RAMBytes: -1}},
			{"disk streamed", k3.Options{RAMBudget: 60e6}, k3.PrefixCacheOptions{RAMBytes: -1}},
			{"ram narrow passes", k3.Options{MaxBatch: 5}, k3.PrefixCacheOptions{RAMBytes: 64 << 20, DiskBytes: -1}},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				c.cache.Dir = t.TempDir()
				c.cache.BlockTokens, c.cache.CheckpointBlocks = 8, 2 // checkpoints every 16 tokens
				opts := c.opts
				opts.MaxContext, opts.Sessions, opts.PrefixCache = 256, 2, &c.cache
				m, _ := openOracle(t, name, opts)
				got, reused := stepFresh(t, m, turn1)
				mustSameBits(t, "first prompt", got, want1)
				if reused != 0 {
					t.Fatalf("a first prompt restored %d tokens", reused)
				}
				before := m.Stats().Passes
				got, reused = stepFresh(t, m, turn1)
				mustSameBits(t, "the same prompt again", got, want1)
				if reused != len(turn1) || m.Stats().Passes != before {
					t.Fatalf("the same prompt again: %d of %d tokens restored, %d passes", reused, len(turn1), m.Stats().Passes-before)
				}
				got, reused = stepFresh(t, m, turn2)
				mustSameBits(t, "next turn", got, want2)
				if reused != len(turn1) {
					t.Fatalf("next turn: %d tokens restored, want the first prompt's %d", reused, len(turn1))
				}
				got, reused = stepFresh(t, m, changed)
				mustSameBits(t, "changed at 60", got, wantChanged)
				if reused != 48 { // the last checkpoint at or before the change (turn 2 kept 48 and 64)
					t.Fatalf("changed at token 60: %d tokens restored, want 48", reused)
				}
				// That prompt branched from turn 2 after 7 shared blocks: it
				// kept the state there, and the next prompt branching at the
				// same point restores all 56 tokens.
				got, reused = stepFresh(t, m, branched)
				mustSameBits(t, "branched at 60", got, wantBranched)
				if reused != 56 {
					t.Fatalf("branched at token 60 after a prompt that did: %d tokens restored, want 56", reused)
				}
				// Shorter than a block: saved at its end, found again.
				got, _ = stepFresh(t, m, short)
				mustSameBits(t, "short prompt", got, wantShort)
				got, reused = stepFresh(t, m, short)
				mustSameBits(t, "short prompt again", got, wantShort)
				if reused != len(short) {
					t.Fatalf("a prompt shorter than a block: %d of %d restored", reused, len(short))
				}
				if st := m.Stats(); st.PrefixHits < 4 || st.PrefixTokens < int64(2*len(turn1)+48) {
					t.Fatalf("stats: %d hits, %d tokens", st.PrefixHits, st.PrefixTokens)
				}
			})
		}
	}
}

// TestPrefixCacheAcrossProcesses checks that a second Model on the same
// directory (as another process would be) restores what the first saved,
// exactly, and that a model of another checkpoint never uses it.
func TestPrefixCacheAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	V := 256
	turn1 := randomIDs(5, 50, V)
	turn2 := append(append([]int(nil), turn1...), 7, 8, 9)
	cache := &k3.PrefixCacheOptions{Dir: dir, RAMBytes: -1}
	a, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 128, PrefixCache: cache})
	stepFresh(t, a, turn1)
	a.Close() // flushes the write-behind
	b, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 128, PrefixCache: cache})
	got, reused := stepFresh(t, b, turn2)
	if reused != len(turn1) {
		t.Fatalf("another model on the directory restored %d tokens, want %d", reused, len(turn1))
	}
	mustSameBits(t, "restored by another model", got, coldLogits(t, "tiny-mxfp4", turn2))
	other, _ := openOracle(t, "tiny-f32", k3.Options{MaxContext: 128, PrefixCache: cache})
	got, reused = stepFresh(t, other, turn2)
	if reused != 0 {
		t.Fatalf("another checkpoint restored %d tokens from this one's cache", reused)
	}
	mustSameBits(t, "another checkpoint", got, coldLogits(t, "tiny-f32", turn2))
}

// TestPrefixCacheDamagedEntries flips, truncates and empties the cache's
// files between two models: the output is unchanged, nothing damaged is
// restored, and the damaged files are gone.
func TestPrefixCacheDamagedEntries(t *testing.T) {
	V := 256
	turn1 := randomIDs(9, 40, V)
	turn2 := append(append([]int(nil), turn1...), 1, 2, 3, 4)
	want := coldLogits(t, "tiny-mxfp4", turn2)
	for _, damage := range []struct {
		name string
		f    func(b []byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)-7] ^= 0x40; return b }},
		{"flipped header byte", func(b []byte) []byte { b[100] ^= 1; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-5] }},
		{"zero-length", func(b []byte) []byte { return nil }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			dir := t.TempDir()
			cache := &k3.PrefixCacheOptions{Dir: dir, RAMBytes: -1, BlockTokens: 8, CheckpointBlocks: 1}
			a, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 128, PrefixCache: cache})
			stepFresh(t, a, turn1)
			a.Close()
			var files []string
			filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() && filepath.Ext(p) != ".lock" {
					files = append(files, p)
				}
				return nil
			})
			if len(files) == 0 {
				t.Fatal("nothing was saved")
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, damage.f(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 128, PrefixCache: cache})
			got, reused := stepFresh(t, b, turn2)
			mustSameBits(t, "after damage", got, want)
			if reused != 0 {
				t.Fatalf("%d tokens restored from damaged entries", reused)
			}
			got, _ = stepFresh(t, b, turn2) // saved afresh, restored whole
			mustSameBits(t, "saved again", got, want)
		})
	}
}

// TestPrefixCacheInBatch runs four sessions at once over prompts that share
// a header, twice: every session's logits equal its cold prefill, in the
// shared passes of the batcher, and the second round restores the header.
func TestPrefixCacheInBatch(t *testing.T) {
	V := 256
	header := randomIDs(11, 33, V)
	var prompts [][]int
	var want [][]float32
	for i := range 4 {
		p := append(append([]int(nil), header...), randomIDs(uint64(20+i), 5+i, V)...)
		prompts = append(prompts, p)
		want = append(want, coldLogits(t, "tiny-mxfp4", p))
	}
	cache := &k3.PrefixCacheOptions{Dir: t.TempDir(), RAMBytes: 32 << 20, BlockTokens: 8}
	m, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 128, Sessions: 4, RAMBudget: 80e6, PrefixCache: cache})
	stepFresh(t, m, header) // the header alone first, as an agent's first request
	for round := range 2 {
		var wg sync.WaitGroup
		got := make([][]float32, len(prompts))
		reused := make([]int, len(prompts))
		for i := range prompts {
			wg.Go(func() { got[i], reused[i] = stepFresh(t, m, prompts[i]) })
		}
		wg.Wait()
		for i := range prompts {
			mustSameBits(t, "in a batch", got[i], want[i])
			if reused[i] < len(header) {
				t.Fatalf("round %d, session %d: %d tokens restored, want at least the header's %d", round, i, reused[i], len(header))
			}
		}
	}
}

// TestPrefixCacheGenerate checks that generation with the cache on, plain
// and speculative, gives the oracle's tokens, restored or not.
func TestPrefixCacheGenerate(t *testing.T) {
	for _, name := range oracles {
		t.Run(name, func(t *testing.T) {
			cache := &k3.PrefixCacheOptions{Dir: t.TempDir(), BlockTokens: 4}
			m, exp := openOracle(t, name, k3.Options{MaxContext: 256, PrefixCache: cache})
			want := exp.FullIDs[len(exp.PromptIDs):]
			for round, opts := range []k3.GenerateOptions{{MaxTokens: len(want)}, {MaxTokens: len(want), Speculate: 3}, {MaxTokens: len(want)}} {
				s := m.NewSession()
				var got []int
				for tok, err := range s.Generate(context.Background(), exp.PromptIDs, opts) {
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, tok.ID)
				}
				if round > 0 && s.CachedTokens() != len(exp.PromptIDs) {
					t.Fatalf("round %d: %d prompt tokens restored, want %d", round, s.CachedTokens(), len(exp.PromptIDs))
				}
				s.Close()
				for i := range want {
					if i >= len(got) || got[i] != want[i] {
						t.Fatalf("round %d: tokens %v, want %v", round, got, want)
					}
				}
			}
			// The next turn resends the reply: the state the generation
			// ended with (every generated token but the last, which was
			// never fed) is restored, and the logits are a cold prefill's.
			next := append(append(slices.Clone(exp.PromptIDs), want...), 7, 8, 9)
			wantLogits := coldLogits(t, name, next)
			got, reused := stepFresh(t, m, next)
			mustSameBits(t, "next turn after a reply", got, wantLogits)
			if w := len(exp.PromptIDs) + len(want) - 1; reused != w {
				t.Fatalf("next turn: %d tokens restored, want %d (the prompt and the reply but its last token)", reused, w)
			}
		})
	}
}

// passCtx is a context cancelled once its model has run a given number
// of passes: a client that disconnects mid-prefill, at a point fixed by
// the work done rather than by a clock.
type passCtx struct {
	context.Context
	m     *k3.Model
	after int64
	once  sync.Once
	done  chan struct{}
}

func (c *passCtx) poll() {
	if c.m.Stats().Passes >= c.after {
		c.once.Do(func() { close(c.done) })
	}
}

func (c *passCtx) Done() <-chan struct{} { c.poll(); return c.done }

func (c *passCtx) Err() error {
	c.poll()
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// TestPrefixCacheCancelMidPrefill cancels a long prefill after its first
// passes: the step stops with the context's error before reading the rest
// of the prompt's passes, what was prefilled stays in the cache, and a
// retry restores it and gives the cold prefill's logits, bit for bit.
func TestPrefixCacheCancelMidPrefill(t *testing.T) {
	for _, name := range oracles {
		t.Run(name, func(t *testing.T) {
			ids := randomIDs(7, 96, 256)
			want := coldLogits(t, name, ids)
			cache := k3.PrefixCacheOptions{Dir: t.TempDir(), RAMBytes: 64 << 20, DiskBytes: -1, BlockTokens: 8, CheckpointBlocks: 2}
			m, _ := openOracle(t, name, k3.Options{MaxContext: 256, MaxBatch: 8, PrefixCache: &cache})
			s := m.NewSession()
			base := m.Stats().Passes
			ctx := &passCtx{Context: context.Background(), m: m, after: base + 3, done: make(chan struct{})}
			_, err := s.Step(ctx, ids)
			s.Close()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled prefill: err %v, want context.Canceled", err)
			}
			// 96 tokens in passes of at most 8 rows are 12 passes; it
			// stops at the first check after the third, between passes.
			ran := m.Stats().Passes - base
			if ran < 3 || ran > 4 {
				t.Fatalf("cancelled after 3 passes, but %d ran", ran)
			}
			got, reused := stepFresh(t, m, ids)
			mustSameBits(t, "retry after a cancelled prefill", got, want)
			// The state where it stopped was kept (not only the
			// checkpoint at 16 tokens): the retry resumes there.
			if want := 8 * int(ran); reused != want {
				t.Fatalf("cancelled after %d passes of 8 tokens: the retry restored %d tokens, want %d", ran, reused, want)
			}
		})
	}
}
