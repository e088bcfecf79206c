package specpolicy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/engine/draft"
)

func TestBucket(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 4, 6: 5, 8: 5, 9: 6, 12: 6, 13: 7, 16: 7, 17: 8, 24: 8, 25: 9, 32: 9, 33: 10, 64: 10, 65: 11, 128: 11, 129: 12, 100000: 12} {
		if got := Bucket(n); got != want {
			t.Errorf("Bucket(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestSurvivalLearns feeds drafts whose tokens are each right with a
// known chance (until the first wrong one) and checks that the estimated
// survival converges to the true one, is non-increasing, and that a
// sequence's own record overrides the server's prior.
func TestSurvivalLearns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ev := draft.Evidence{Source: draft.Own, Match: 10}
	q := []float64{0.9, 0.8, 0.7, 0.6}
	var c Counts
	for range 20000 {
		right := 0
		for right < len(q) && rng.Float64() < q[right] {
			right++
		}
		c.Observe(ev, len(q), right)
	}
	s := Survival(&c, nil, ev, 4, nil)
	want := 1.0
	for j := range q {
		want *= q[j]
		if math.Abs(s[j]-want) > 0.02 {
			t.Errorf("S(%d) = %.3f, want %.3f", j+1, s[j], want)
		}
		if j > 0 && s[j] > s[j-1] {
			t.Errorf("survival increases at %d: %v", j+1, s)
		}
	}
	// Another bucket has seen nothing: the flat prior.
	if s := Survival(&c, nil, draft.Evidence{Source: draft.Own, Match: 1}, 1, nil); math.Abs(s[0]-float64(priorA)/(priorA+priorB)) > 1e-9 {
		t.Errorf("no observations: %v", s)
	}
	// The server's record as a prior, a sequence that disagrees.
	var sh Shared
	cc := c
	sh.Merge(&cc)
	if cc.Total() != 0 {
		t.Fatal("Merge left the delta")
	}
	var prior Counts
	sh.Snapshot(&prior)
	var own Counts
	for range 2000 {
		own.Observe(ev, 4, 0) // this sequence's drafts are always wrong
	}
	if s := Survival(&own, &prior, ev, 1, nil); s[0] > 0.05 {
		t.Errorf("a sequence whose drafts fail: S(1) = %.3f", s[0])
	}
	if s := Survival(nil, &prior, ev, 1, nil); math.Abs(s[0]-0.9) > 0.02 {
		t.Errorf("the server's prior: S(1) = %.3f", s[0])
	}
	// Nothing for no evidence.
	if s := Survival(&c, nil, draft.Evidence{}, 3, nil); len(s) != 0 {
		t.Errorf("no source: %v", s)
	}
}

// ratio is the objective Choose maximises.
func ratio(p Pass, offers []Offer, ks []int, c *Cost) float64 {
	rows, spec, tok := p.Rows, 0, p.Tokens
	for i, k := range ks {
		if k > 0 {
			spec++
			rows += k
			for _, s := range offers[i].Survival[:k] {
				tok += s
			}
		}
	}
	return tok / c.Seconds(rows, spec)
}

// brute tries every draft count of every offer; drafts must beat none by
// MinGain.
func brute(p Pass, offers []Offer, c *Cost) float64 {
	plain := ratio(p, offers, make([]int, len(offers)), c)
	best := 0.0
	ks := make([]int, len(offers))
	var rec func(i int)
	rec = func(i int) {
		if i == len(offers) {
			rows, spec := p.Rows, 0
			for _, k := range ks {
				rows += k
				if k > 0 {
					spec++
				}
			}
			if rows > p.MaxRows || (p.MaxSpec >= 0 && spec > p.MaxSpec) {
				return
			}
			best = max(best, ratio(p, offers, ks, c))
			return
		}
		for k := 0; k <= len(offers[i].Survival); k++ {
			ks[i] = k
			rec(i + 1)
		}
		ks[i] = 0
	}
	rec(0)
	if best <= plain*(1+MinGain) {
		return plain
	}
	return best
}

func randomOffer(rng *rand.Rand) Offer {
	n := rng.IntN(5)
	s := make([]float64, n)
	p := 1.0
	for j := range s {
		p *= rng.Float64()
		s[j] = p
	}
	return Offer{Survival: s}
}

func randomCost(rng *rand.Rand) *Cost {
	c := &Cost{TrunkBytes: rng.Float64() * 10, ExpertBytes: rng.Float64() * 2, Experts: 8 + rng.IntN(100), TopK: 1 + rng.IntN(8),
		BytesPerSecond: 1 + rng.Float64()*5, CPUFixed: rng.Float64(), CPURow: rng.Float64() * 0.5}
	if rng.IntN(3) == 0 {
		c.BytesPerSecond = 0 // resident
	}
	return c
}

// TestChooseIsOptimal compares Choose with trying every combination: with
// no per-sequence cost it reaches the best ratio; with one it is never
// below plain decoding and optimal for a lone sequence; and it respects
// the bounds on rows and speculating sequences.
func TestChooseIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var ch Chooser
	for trial := 0; trial < 3000; trial++ {
		c := randomCost(rng)
		offers := make([]Offer, 1+rng.IntN(3))
		for i := range offers {
			offers[i] = randomOffer(rng)
		}
		p := Pass{Rows: len(offers) + rng.IntN(4), MaxRows: 100, MaxSpec: -1}
		p.Tokens = float64(len(offers))
		if rng.IntN(4) == 0 {
			p.MaxRows = p.Rows + rng.IntN(4)
		}
		if rng.IntN(4) == 0 {
			p.MaxSpec = rng.IntN(len(offers) + 1)
		}
		if rng.IntN(2) == 0 {
			c.SpecSeq = rng.Float64() * 0.3
		}
		ks := ch.Choose(nil, p, offers, c)
		rows, spec := p.Rows, 0
		for i, k := range ks {
			if k < 0 || k > len(offers[i].Survival) {
				t.Fatalf("trial %d: offer %d gets %d of %d drafts", trial, i, k, len(offers[i].Survival))
			}
			rows += k
			if k > 0 {
				spec++
			}
		}
		if rows > p.MaxRows || (p.MaxSpec >= 0 && spec > p.MaxSpec) {
			t.Fatalf("trial %d: %d rows (max %d), %d speculating (max %d)", trial, rows, p.MaxRows, spec, p.MaxSpec)
		}
		got := ratio(p, offers, ks, c)
		plain := ratio(p, offers, make([]int, len(offers)), c)
		if got < plain*(1-1e-12) {
			t.Fatalf("trial %d: ratio %.6f below plain %.6f", trial, got, plain)
		}
		if b := brute(p, offers, c); got < b*(1-1e-9) {
			t.Fatalf("trial %d: ratio %.9f, the best is %.9f (offers %+v, cost %+v, pass %+v, chose %v)", trial, got, b, offers, c, p, ks)
		}
	}
}

// TestChooseGreedyFallback checks the fallback for passes too large for
// the dynamic program: optimal when sequences cost nothing by themselves
// and their number is not bounded.
func TestChooseGreedyFallback(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ch := Chooser{greedyOnly: true}
	for trial := 0; trial < 2000; trial++ {
		c := randomCost(rng)
		offers := make([]Offer, 1+rng.IntN(3))
		for i := range offers {
			offers[i] = randomOffer(rng)
		}
		p := Pass{Rows: len(offers), Tokens: float64(len(offers)), MaxRows: 100, MaxSpec: -1}
		if rng.IntN(4) == 0 {
			p.MaxRows = p.Rows + rng.IntN(4)
		}
		ks := ch.Choose(nil, p, offers, c)
		if got, b := ratio(p, offers, ks, c), brute(p, offers, c); got < b*(1-1e-9) {
			t.Fatalf("trial %d: greedy %.9f, best %.9f", trial, got, b)
		}
	}
}

// TestChooseForcedAndCosts checks forced offers, and the two regimes the
// policy exists for: a streamed trunk, where a likely draft pays, and a
// resident model whose rows cost as much as a pass, where nothing does.
func TestChooseForcedAndCosts(t *testing.T) {
	var ch Chooser
	s := []float64{0.9, 0.8, 0.6, 0.3, 0.1}
	p := Pass{Rows: 1, Tokens: 1, MaxRows: 256, MaxSpec: -1}
	if ks := ch.Choose(nil, p, []Offer{{Survival: s, Force: true}}, &Cost{CPURow: 100}); ks[0] != 5 {
		t.Fatalf("forced: %v", ks)
	}
	// 8 GB on the released shape: 108 GB of trunk per pass, 25 GB per
	// distinct expert per layer (92 layers): a likely draft pays.
	stream := &Cost{TrunkBytes: 108e9, ExpertBytes: 92 * 17.5e6, Experts: 896, TopK: 16, BytesPerSecond: 6e9}
	if ks := ch.Choose(nil, p, []Offer{{Survival: s}}, stream); ks[0] < 2 || ks[0] > 4 {
		t.Fatalf("streamed trunk: %v drafts of %v", ks, s)
	}
	// Trunk resident: a second row doubles the bytes: nothing pays.
	resident := &Cost{ExpertBytes: 92 * 17.5e6, Experts: 896, TopK: 16, BytesPerSecond: 6e9}
	if ks := ch.Choose(nil, p, []Offer{{Survival: s}}, resident); ks[0] != 0 {
		t.Fatalf("trunk resident: %v drafts", ks)
	}
	// In a batch of 16 with the trunk streaming, only the likeliest pay.
	batch := Pass{Rows: 16, Tokens: 16, MaxRows: 256, MaxSpec: -1}
	ks := ch.Choose(nil, batch, []Offer{{Survival: []float64{0.99, 0.98}}, {Survival: []float64{0.3}}}, &Cost{TrunkBytes: 108e9, ExpertBytes: 92 * 17.5e6, Experts: 896, TopK: 16, BytesPerSecond: 6e9})
	if ks[0] != 2 || ks[1] != 0 {
		t.Fatalf("batch of 16: %v", ks)
	}
}

// TestCalibrationFits runs passes from a known cost and checks that the
// fitted one predicts them.
func TestCalibrationFits(t *testing.T) {
	truth := Cost{TrunkBytes: 5e9, ExpertBytes: 0, Experts: 64, TopK: 16, BytesPerSecond: 2.5e9, CPUFixed: 0.3, CPURow: 0.07}
	full := 3 * 17.5e6
	truth.ExpertBytes = full * 0.7
	k := NewCalibration(truth.TrunkBytes, full, 64, 16, 17.0/64)
	if k.Ready() {
		t.Fatal("ready before any pass")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 200; i++ {
		rows := 1
		if i%3 == 0 {
			rows = 2 + rng.IntN(6)
		}
		u := truth.Union(rows)
		bytes := truth.Bytes(rows)
		k.Observe(Observation{Rows: rows, Seconds: truth.Seconds(rows, 0), Bytes: bytes, IOSeconds: bytes / truth.BytesPerSecond,
			ExpertBytes: full * 0.7 * u, Union: u})
	}
	if !k.Ready() {
		t.Fatal("not ready")
	}
	c := k.Cost()
	for _, rows := range []int{1, 2, 4, 8} {
		if got, want := c.Seconds(rows, 0), truth.Seconds(rows, 0); math.Abs(got-want) > 0.01*want {
			t.Errorf("%d rows: %.4f s, truth %.4f", rows, got, want)
		}
	}
	// Only one width seen: the prior slope.
	k = NewCalibration(0, 0, 64, 16, 1)
	for range 10 {
		k.Observe(Observation{Rows: 1, Seconds: 0.4})
	}
	c = k.Cost()
	if math.Abs(c.Seconds(1, 0)-0.4) > 1e-9 || math.Abs(c.CPURow-rowPrior*0.4) > 1e-9 {
		t.Errorf("one width: %+v", c)
	}
}

// TestCorrection: drafted tokens estimated right 90% of the time that are
// right 60% of the time pull the estimates of that bin to 60%, and leave
// the other bins alone; without evidence nothing changes.
func TestCorrection(t *testing.T) {
	if s := Corrected(0.7, nil, &Counts{}); s != 0.7 {
		t.Fatalf("no evidence: %v", s)
	}
	var c Counts
	for range 1000 {
		c.Verified([]float64{0.9}, 0)
		c.Verified([]float64{0.9, 0.9}, 2)
		c.Verified([]float64{0.9, 0.9}, 1)
	}
	if s := Corrected(0.9, &c, nil); math.Abs(s-0.6) > 0.01 {
		t.Fatalf("corrected %v, want 0.6", s)
	}
	if s := Corrected(0.5, &c, nil); s != 0.5 {
		t.Fatalf("another bin moved: %v", s)
	}
	var sh Shared
	d := c
	sh.Merge(&d)
	var prior Counts
	sh.Snapshot(&prior)
	if s := Corrected(0.9, nil, &prior); math.Abs(s-0.6) > 0.01 {
		t.Fatalf("through the server's record: %v", s)
	}
}
