package k3_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/k3go/k3"
)

// scriptDrafter proposes from a fixed continuation of the prompt: right
// (the true tokens), wrong (every token shifted), or random.
type scriptDrafter struct {
	prompt, cont []int
	mode         string
	vocab        int
	rng          *rand.Rand
	mu           sync.Mutex
}

func (d *scriptDrafter) Draft(seq []int, max int, dst []int) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := len(seq) - len(d.prompt)
	for j := 0; j < max; j++ {
		switch d.mode {
		case "right":
			if at+j >= len(d.cont) {
				return dst
			}
			dst = append(dst, d.cont[at+j])
		case "wrong":
			t := 0
			if at+j < len(d.cont) {
				t = d.cont[at+j]
			}
			dst = append(dst, (t+1)%d.vocab)
		default:
			dst = append(dst, d.rng.IntN(d.vocab))
		}
	}
	return dst
}

func sessionIDs(t *testing.T, s *k3.Session, prompt []int, opts k3.GenerateOptions) []int {
	t.Helper()
	var ids []int
	for tok, err := range s.Generate(context.Background(), prompt, opts) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
	}
	return ids
}

// TestSpeculationExact checks that speculative decoding gives exactly the
// tokens of plain decoding with drafts that are always right, always
// wrong and random, greedy and seeded sampling, stop tokens in the middle
// of an accepted run, and that the session continues exactly afterwards;
// at a streaming budget and resident.
func TestSpeculationExact(t *testing.T) {
	for _, budget := range []int64{0, 60e6} {
		// Auto's choices under a fixed cost of a streamed trunk: drafts
		// pay, so it verifies the likely ones.
		k3.FixSpecCost(t, k3.StreamingSpecCost)
		m, exp := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: budget, MaxContext: 128, Sessions: 2, Speculate: 8})
		V := m.Config().Vocab
		prompt := exp.PromptIDs
		for _, sampling := range []k3.SamplingOptions{{}, {Temperature: 0.9, TopK: 40, Seed: 7}} {
			base := k3.GenerateOptions{MaxTokens: 40, Sampling: sampling}
			plainS := m.NewSession()
			plain := sessionIDs(t, plainS, prompt, base)
			after := sessionIDs(t, plainS, []int{3}, k3.GenerateOptions{MaxTokens: 5})
			plainS.Close()
			for _, mode := range []string{"right", "wrong", "random", "ngram"} {
				for _, k := range []int{1, 4, 8, k3.SpeculateAuto} {
					o := base
					o.Speculate = k
					if mode != "ngram" {
						o.Drafter = &scriptDrafter{prompt: prompt, cont: plain, mode: mode, vocab: V, rng: rand.New(rand.NewPCG(1, uint64(k)))}
					}
					before := m.Stats()
					s := m.NewSession()
					got := sessionIDs(t, s, prompt, o)
					if !slices.Equal(got, plain) {
						t.Fatalf("budget %d %v %s k=%d: %v, plain %v", budget, sampling, mode, k, got, plain)
					}
					if g := sessionIDs(t, s, []int{3}, k3.GenerateOptions{MaxTokens: 5}); !slices.Equal(g, after) {
						t.Fatalf("budget %d %s k=%d: the session continues with %v, plain %v", budget, mode, k, g, after)
					}
					s.Close()
					d := m.Stats().Sub(before)
					switch mode {
					case "right":
						if d.SpecAccepted < int64(len(plain))/2 {
							t.Fatalf("%s k=%d: %d drafts accepted of %d tokens", mode, k, d.SpecAccepted, len(plain))
						}
					case "wrong":
						drafted := d.SpecRows - d.SpecPasses
						switch {
						case d.SpecAccepted != 0:
							t.Fatalf("wrong drafts: %d accepted", d.SpecAccepted)
						case k > 0 && drafted < int64(len(plain))-1:
							t.Fatalf("k=%d: %d wrong drafts verified in %d tokens; a fixed length verifies every draft", k, drafted, len(plain))
						case k == k3.SpeculateAuto && drafted > 2*int64(len(plain)):
							// Up to 8 a pass at first (the model's record says
							// this drafter's drafts are right: the "right" runs
							// came first), then fewer as this sequence's own
							// record of failures outweighs it.
							t.Fatalf("auto: %d wrong drafts verified in %d tokens: it should learn they fail", drafted, len(plain))
						}
					}
				}
			}
			// A stop token inside an accepted run of drafts.
			stop := plain[10]
			o := base
			o.StopTokens, o.Speculate = []int{stop}, 8
			o.Drafter = &scriptDrafter{prompt: prompt, cont: plain, mode: "right", vocab: V}
			s, ps := m.NewSession(), m.NewSession()
			po := base
			po.StopTokens = []int{stop}
			if got, want := sessionIDs(t, s, prompt, o), sessionIDs(t, ps, prompt, po); !slices.Equal(got, want) {
				t.Fatalf("with a stop token: %v, plain %v", got, want)
			}
			if got, want := sessionIDs(t, s, nil, base), sessionIDs(t, ps, nil, base); !slices.Equal(got, want) {
				t.Fatalf("after the stop token: %v, plain %v", got, want)
			}
			s.Close()
			ps.Close()
		}
	}
}

// TestSpeculationOracleGates runs both oracles' greedy decoding with
// Speculate 4 (n-gram drafts and right drafts), alone and in a batch with
// plain sequences: the tokens are the oracle's.
func TestSpeculationOracleGates(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		m, exp := openOracle(t, name, k3.Options{MaxContext: 64, Sessions: 4})
		want := exp.FullIDs[len(exp.PromptIDs):]
		V := m.Config().Vocab
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				o := k3.GenerateOptions{MaxTokens: len(want)}
				switch g {
				case 0:
					o.Speculate = 4
				case 1:
					o.Speculate = 4
					o.Drafter = &scriptDrafter{prompt: exp.PromptIDs, cont: want, mode: "right", vocab: V}
				case 2:
					o.Speculate = k3.SpeculateAuto
				}
				s := m.NewSession()
				defer s.Close()
				var got []int
				for tok, err := range s.Generate(context.Background(), exp.PromptIDs, o) {
					if err != nil {
						t.Error(err)
						return
					}
					got = append(got, tok.ID)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s session %d (speculate %d): %v, oracle %v", name, g, o.Speculate, got, want)
				}
			})
		}
		wg.Wait()
	}
}

// TestSpeculationAutoAbstains: where a row costs as much as a pass, auto
// verifies no draft, however right, and decodes exactly; where the budget
// reserved nothing for speculation, auto decodes plainly.
func TestSpeculationAutoAbstains(t *testing.T) {
	k3.FixSpecCost(t, k3.ResidentSpecCost)
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 64})
	want := exp.FullIDs[len(exp.PromptIDs):]
	d := &scriptDrafter{prompt: exp.PromptIDs, cont: want, mode: "right", vocab: m.Config().Vocab}
	before := m.Stats()
	s := m.NewSession()
	if got := sessionIDs(t, s, exp.PromptIDs, k3.GenerateOptions{MaxTokens: len(want), Speculate: k3.SpeculateAuto, Drafter: d}); !slices.Equal(got, want) {
		t.Fatalf("auto: %v, oracle %v", got, want)
	}
	if dr, _ := s.Speculation(); dr != 0 || m.Stats().Sub(before).SpecPasses != 0 {
		t.Fatalf("auto verified %d drafts where rows cost a pass", dr)
	}
	s.Close()
	m2, _ := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: 60e6, MaxContext: 64})
	s2 := m2.NewSession()
	defer s2.Close()
	if got := sessionIDs(t, s2, exp.PromptIDs, k3.GenerateOptions{MaxTokens: len(want), Speculate: k3.SpeculateAuto, Drafter: d}); !slices.Equal(got, want) {
		t.Fatalf("auto without a reservation: %v, oracle %v", got, want)
	}
	if m2.Stats().SpecPasses != 0 {
		t.Fatal("auto speculated without rollback buffers")
	}
}

func TestSpeculationOptions(t *testing.T) {
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: 60e6, MaxContext: 64, Speculate: 2})
	for _, o := range []k3.GenerateOptions{{Speculate: -2}, {Speculate: 3}, k3.FullRecompute(k3.GenerateOptions{Speculate: 1})} {
		for _, err := range m.Generate(context.Background(), exp.PromptIDs, o) {
			if err == nil {
				t.Fatalf("%+v accepted", o)
			}
		}
	}
}

// TestSpeculationCancelled cancels a speculative step that shares its
// passes with another session: whatever was fed, the session keeps only
// verified tokens and continues exactly like plain decoding.
func TestSpeculationCancelled(t *testing.T) {
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 4096, Sessions: 3, PrefillChunk: 2, MaxBatch: 3})
	V := m.Config().Vocab
	plainS := m.NewSession()
	plain := sessionIDs(t, plainS, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 30})
	plainS.Close()
	long := make([]int, 2000)
	for i := range long {
		long[i] = i % V
	}
	busy := m.NewSession()
	defer busy.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { busy.Step(context.Background(), long) })
	s := m.NewSession()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	d := &scriptDrafter{prompt: exp.PromptIDs, cont: plain, mode: "right", vocab: V}
	var got []int
	for tok, err := range s.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 30, Speculate: 8, Drafter: d}) {
		if err != nil {
			break
		}
		got = append(got, tok.ID)
		if len(got) == 3 {
			cancel()
		}
	}
	cancel()
	// Whatever the cancel cut, the sequence holds only verified tokens:
	// continuing gives the plain tokens.
	if s.Len() < len(exp.PromptIDs) || !slices.Equal(s.Tokens()[:len(exp.PromptIDs)], exp.PromptIDs) {
		t.Fatalf("the sequence lost its prompt: %v", s.Tokens())
	}
	n := s.Len() - len(exp.PromptIDs)
	if !slices.Equal(s.Tokens()[len(exp.PromptIDs):], plain[:n]) {
		t.Fatalf("after the cancel the sequence holds %v, plain %v", s.Tokens()[len(exp.PromptIDs):], plain[:n])
	}
	rest := sessionIDs(t, s, nil, k3.GenerateOptions{MaxTokens: 30 - n})
	if !slices.Equal(rest, plain[n:]) {
		t.Fatalf("continuing after the cancel: %v, plain %v", rest, plain[n:])
	}
}
