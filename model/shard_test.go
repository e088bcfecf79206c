package model_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/oracle"
	"github.com/k3go/k3/model"
)

// localRanks is a cluster in one process: ranks 1..N-1 are models of
// their sharded plans, serving rank 0's rounds on goroutines.
type localRanks struct {
	servers []*model.Server
	mu      sync.Mutex
	rounds  int
	// What the rounds carried, as model.CountRounds counts it; expert
	// counts the rounds of the routed experts.
	seen   model.PassRounds
	expert int
	// distinct counts the floats of the inputs the experts' up rounds
	// pick their rows from.
	distinct int64
}

func (l *localRanks) Size() int { return len(l.servers) + 1 }

func (l *localRanks) Round(ctx context.Context, rd *model.Round, local func() error) error {
	l.mu.Lock()
	l.rounds++
	l.seen.Rounds++
	l.seen.Inputs += float64(len(rd.Inputs))
	l.seen.Products += float64(len(rd.Products))
	for _, in := range rd.Inputs {
		l.seen.InputFloats += int64(len(in))
	}
	if l.seen.Out == nil {
		l.seen.Out = map[int]int64{}
	}
	for _, pr := range rd.Products {
		l.seen.Out[pr.Rows] += int64(pr.N)
		l.seen.InputFloats += int64(len(pr.Pick))
	}
	if rd.Kind == model.RoundExpertUp {
		counted := map[int]bool{}
		for _, pr := range rd.Products {
			if !pr.Layer && !counted[pr.In] {
				counted[pr.In] = true
				l.distinct += int64(len(rd.Inputs[pr.In]))
			}
		}
	}
	if rd.Kind == model.RoundExpertUp || rd.Kind == model.RoundExpertDown {
		l.expert++
	}
	l.mu.Unlock()
	errs := make([]error, len(l.servers)+1)
	var wg sync.WaitGroup
	for i, s := range l.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sl, err := s.Round(ctx, rd)
			if err == nil {
				model.Place(rd, i+1, l.Size(), sl)
			}
			errs[i+1] = err
		}()
	}
	errs[0] = local()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// loadCluster loads oracle name as a cluster of ranks ranks in one
// process and returns rank 0's model.
func loadCluster(t *testing.T, name string, ranks, threads int) (*model.Model, *localRanks) {
	t.Helper()
	p, _ := oracle.Open(t, name)
	read := oracle.Read(p)
	cl := &localRanks{}
	for r := 1; r < ranks; r++ {
		sp, err := p.Shard(r, ranks)
		if err != nil {
			t.Fatal(err)
		}
		pool := par.New(threads)
		t.Cleanup(pool.Close)
		m, err := model.Load(context.Background(), sp, read, model.Options{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		s := m.NewServer()
		t.Cleanup(s.End)
		cl.servers = append(cl.servers, s)
	}
	sp, err := p.Shard(0, ranks)
	if err != nil {
		t.Fatal(err)
	}
	pool := par.New(threads)
	t.Cleanup(pool.Close)
	opts := model.Options{Pool: pool, Ranks: cl}
	if ranks == 1 {
		opts.Ranks = nil
	}
	m, err := model.Load(context.Background(), sp, read, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, cl
}

// TestShardedExact runs both oracles as clusters of 1, 2 and 3 ranks in
// one process: teacher-forced logits bit-identical to the whole model's,
// in random batch compositions, and every pass really went through rounds.
func TestShardedExact(t *testing.T) {
	for _, name := range oracle.Names {
		t.Run(name, func(t *testing.T) {
			ref, exp := oracle.Load(t, name, model.Options{})
			V := ref.Cfg.Vocab
			want := oracle.Teacher(t, ref, exp.FullIDs)
			rng := rand.New(rand.NewPCG(3, uint64(len(name))))
			seqs := make([][]int, 4)
			wants := make([][]float32, len(seqs))
			for i := range seqs {
				seqs[i] = make([]int, 3+rng.IntN(20))
				for j := range seqs[i] {
					seqs[i][j] = rng.IntN(V)
				}
				wants[i] = oracle.Teacher(t, ref, seqs[i])
			}
			for _, ranks := range []int{1, 2, 3} {
				for _, threads := range []int{1, 2} {
					m, cl := loadCluster(t, name, ranks, threads)
					oracle.SameBits(t, fmt.Sprintf("%d ranks, %d threads: teacher forcing", ranks, threads), oracle.Teacher(t, m, exp.FullIDs), want, V)
					oracle.CheckRandomBatches(t, m, rng, seqs, wants, 7, 3)
					if ranks > 1 && cl.rounds == 0 {
						t.Fatalf("%d ranks: no round went to the other ranks", ranks)
					}
				}
			}
		})
	}
}

// TestRoundRefusesBadPicks sends a worker expert rounds whose picks name a
// row the input does not hold, or more rows than it holds: each is an
// error, never a panic or a read past the input; a good pick computes.
func TestRoundRefusesBadPicks(t *testing.T) {
	m, cl := loadCluster(t, oracle.Names[0], 2, 1)
	c := m.Cfg
	in := make([]float32, 2*c.LatentDim) // two rows
	for i := range in {
		in[i] = float32(i%7) / 8
	}
	round := func(pick ...int32) error {
		rd := &model.Round{Layer: firstMoE(c), Kind: model.RoundExpertUp, Inputs: [][]float32{in},
			Products: []model.Product{{Expert: 0, W: 0, GLU: true, In: 0, N: len(pick), Rows: c.MoEIntermediate, Pick: pick}}}
		_, err := cl.servers[0].Round(context.Background(), rd)
		return err
	}
	if err := round(1, 0); err != nil {
		t.Fatalf("two good picks: %v", err)
	}
	for _, bad := range [][]int32{{2}, {-1}, {0, 1, 0}} {
		if err := round(bad...); err == nil {
			t.Fatalf("picks %v of an input of 2 rows: no error", bad)
		}
	}
}

func firstMoE(c *model.Config) int {
	for l := 0; l < c.Layers; l++ {
		if !c.IsDense(l) {
			return l
		}
	}
	return 0
}
