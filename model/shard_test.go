package model_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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
	// forgotten are states ForgetState named, dropped before the next
	// round.
	forgotten []uint64
	kda       int // RoundKDA rounds
	moves     int // states moved whole (PutState, GetState)
}

func (l *localRanks) Size() int { return len(l.servers) + 1 }

func (l *localRanks) Round(ctx context.Context, rd *model.Round, local func() error) error {
	l.forget()
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
		if rd.Kind == model.RoundKDA {
			l.seen.HeadRows += int64(pr.N)
			continue
		}
		l.seen.Out[pr.Rows] += int64(pr.N)
		l.seen.InputFloats += int64(len(pr.Pick))
	}
	l.seen.Seqs += int64(len(rd.Seqs))
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
	if rd.Kind == model.RoundKDA {
		l.kda++
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

// PutState, GetState and ForgetState make localRanks a model.StateRanks:
// its KDA layers run by heads on every rank.
func (l *localRanks) PutState(_ context.Context, rank int, id uint64, from int, parts [][]float32) error {
	var data []float32
	for _, p := range parts {
		data = append(data, p...)
	}
	l.forget()
	l.moves++
	return l.servers[rank-1].Heads().Put(id, from, data)
}

func (l *localRanks) GetState(_ context.Context, rank int, id uint64, from int, parts [][]float32) error {
	l.forget()
	l.moves++
	src, err := l.servers[rank-1].Heads().Get(id)
	if err != nil {
		return err
	}
	if from < 0 || from+len(parts) > len(src) {
		return fmt.Errorf("rank %d: parts [%d, %d) of a state of %d", rank, from, from+len(parts), len(src))
	}
	src = src[from : from+len(parts)]
	for i := range parts {
		if len(src[i]) != len(parts[i]) {
			return fmt.Errorf("rank %d: part %d of %d floats, want %d", rank, i, len(src[i]), len(parts[i]))
		}
		copy(parts[i], src[i])
	}
	return nil
}

func (l *localRanks) RollbackState(_ context.Context, rank int, id uint64, keep int) error {
	l.forget()
	return l.servers[rank-1].Rollback(id, keep)
}

func (l *localRanks) ForgetState(id uint64) {
	l.mu.Lock()
	l.forgotten = append(l.forgotten, id)
	l.mu.Unlock()
}

// forget drops the forgotten states' heads (no round is running).
func (l *localRanks) forget() {
	l.mu.Lock()
	ids := l.forgotten
	l.forgotten = nil
	l.mu.Unlock()
	for _, id := range ids {
		for _, s := range l.servers {
			s.Heads().Forget(id)
		}
	}
}

// rowRanks is a cluster whose KDA layers run their products as rounds
// and their heads on rank 0 (a model.Ranks that is no StateRanks).
type rowRanks struct{ l *localRanks }

func (r rowRanks) Size() int { return r.l.Size() }
func (r rowRanks) Round(ctx context.Context, rd *model.Round, local func() error) error {
	return r.l.Round(ctx, rd, local)
}

// loadCluster loads oracle name as a cluster of ranks ranks in one
// process and returns rank 0's model.
func loadCluster(t *testing.T, name string, ranks, threads int) (*model.Model, *localRanks) {
	return loadClusterHeads(t, name, ranks, threads, true)
}

// loadClusterHeads is loadCluster with the KDA heads split over the
// ranks (heads) or all on rank 0.
func loadClusterHeads(t *testing.T, name string, ranks, threads int, heads bool) (*model.Model, *localRanks) {
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
	if !heads {
		opts.Ranks = rowRanks{cl}
	}
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
					heads := threads == 1 || ranks == 1 // 2 threads: the KDA heads on rank 0
					m, cl := loadClusterHeads(t, name, ranks, threads, heads)
					oracle.SameBits(t, fmt.Sprintf("%d ranks, %d threads, heads split %v: teacher forcing", ranks, threads, heads), oracle.Teacher(t, m, exp.FullIDs), want, V)
					oracle.CheckRandomBatches(t, m, rng, seqs, wants, 7, 3)
					if ranks > 1 && cl.rounds == 0 {
						t.Fatalf("%d ranks: no round went to the other ranks", ranks)
					}
					if split := cl.kda > 0; ranks > 1 && split != heads {
						t.Fatalf("%d ranks: %d rounds of KDA heads, with the heads split %v", ranks, cl.kda, heads)
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

// TestShardedHeadsMove checks a cluster's states against one process as
// they speculate and move: a speculation over a state whose heads are
// away runs split, every rank copying, recording and rolling back its own
// heads, in a pass with another away sequence, and moves no state; Home
// brings a state whose Recurrent arrays are then bit-identical to the
// whole model's; the next split pass sends it back.
func TestShardedHeadsMove(t *testing.T) {
	for _, name := range oracle.Names {
		ref, exp := oracle.Load(t, name, model.Options{})
		c := ref.Cfg
		V := c.Vocab
		seq := exp.FullIDs
		if len(seq) < 14 {
			t.Fatalf("%s: a sequence of %d tokens", name, len(seq))
		}
		want := oracle.Teacher(t, ref, seq)
		for _, ranks := range []int{2, 3} {
			m, cl := loadCluster(t, name, ranks, 1)
			sc := model.NewScratch(m.Cfg, 16, 0)
			st, other := model.NewState(m.Cfg, 64), model.NewState(m.Cfg, 64)
			out := make([]float32, 8*V)
			fwd := func(gs ...model.Group) {
				t.Helper()
				if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
					t.Fatalf("%s, %d ranks: %v", name, ranks, err)
				}
			}
			check := func(what string, from, n int) {
				t.Helper()
				oracle.SameBits(t, fmt.Sprintf("%s, %d ranks: %s", name, ranks, what), out[:n*V], want[from*V:(from+n)*V], V)
			}
			fwd(model.Group{St: st, Tokens: seq[:5], All: true, Out: out}, model.Group{St: other, Tokens: seq[:2]})
			check("a split pass", 0, 5)
			kda := cl.kda
			st.BeginSpeculation(4)
			fwd(model.Group{St: st, Tokens: []int{seq[5], seq[6], seq[7], (seq[7] + 1) % V}, All: true, Out: out},
				model.Group{St: other, Tokens: seq[2:3]})
			if cl.kda == kda {
				t.Fatalf("%s, %d ranks: a speculative pass did not split its KDA layers", name, ranks)
			}
			if err := m.Rollback(st, 3); err != nil {
				t.Fatal(err)
			}
			check("speculation on every rank's heads, rolled back", 5, 3)
			// Twice more: all rows kept, then none.
			st.BeginSpeculation(2)
			fwd(model.Group{St: st, Tokens: seq[8:10], All: true, Out: out}, model.Group{St: other, Tokens: seq[3:4]})
			check("speculation, all kept", 8, 2)
			st.EndSpeculation()
			st.BeginSpeculation(3)
			fwd(model.Group{St: st, Tokens: []int{seq[10], (seq[11] + 1) % V, seq[12]}, All: true, Out: out}, model.Group{St: other, Tokens: seq[4:5]})
			check("speculation, first row of three", 10, 1)
			if err := m.Rollback(st, 1); err != nil {
				t.Fatal(err)
			}
			fwd(model.Group{St: st, Tokens: seq[11:12], All: true, Out: out}, model.Group{St: other, Tokens: seq[5:6]})
			check("after the speculations", 11, 1)
			if cl.moves != 0 {
				t.Fatalf("%s, %d ranks: speculation moved %d states", name, ranks, cl.moves)
			}
			if err := m.Home(context.Background(), st); err != nil {
				t.Fatal(err)
			}
			whole := model.NewState(c, 64)
			if err := ref.ForwardBatch(context.Background(), model.NewScratch(c, 16, 0), []model.Group{{St: whole, Tokens: seq[:12]}}); err != nil {
				t.Fatal(err)
			}
			got, wantRec := st.Recurrent(), whole.Recurrent()
			for i := range wantRec {
				for j := range wantRec[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(wantRec[i][j]) {
						t.Fatalf("%s, %d ranks: recurrent array %d float %d after Home: %v, one process %v", name, ranks, i, j, got[i][j], wantRec[i][j])
					}
				}
			}
			fwd(model.Group{St: st, Tokens: seq[12:14], All: true, Out: out})
			check("after Home", 12, 2)
			for r, s := range cl.servers {
				if s.Heads().Len() != 2 {
					t.Fatalf("%s: rank %d of %d holds %d states' heads, want 2", name, r+1, ranks, s.Heads().Len())
				}
			}
		}
	}
}

// TestHeadsUnknownState sends a worker a KDA round over a state it never
// held (as after it restarted): an error that says so, not a state made
// up of zeros.
func TestHeadsUnknownState(t *testing.T) {
	m, cl := loadCluster(t, oracle.Names[0], 2, 1)
	c := m.Cfg
	l := 0
	for c.IsMLA(l) {
		l++
	}
	in := make([]float32, c.Hidden)
	for i := range in {
		in[i] = float32(i%5) / 4
	}
	round := func(fresh bool) error {
		rd := &model.Round{Layer: l, Kind: model.RoundKDA, Inputs: [][]float32{in},
			Products: []model.Product{{Mat: model.MatOProj, N: 1, Rows: c.KDAWidth(), Unit: c.KDAHeadDim}},
			Seqs:     []model.RoundSeq{{ID: 1 << 60, N: 1, Fresh: fresh}}}
		_, err := cl.servers[0].Round(context.Background(), rd)
		return err
	}
	if err := round(false); err == nil || !strings.Contains(err.Error(), "no state") {
		t.Fatalf("a round over a state the rank never held: %v", err)
	}
	if err := round(true); err != nil {
		t.Fatalf("a round that starts the state: %v", err)
	}
	if err := round(false); err != nil {
		t.Fatalf("the state's next round: %v", err)
	}
}

// TestHeadsRoundAllocs checks that a worker's KDA round allocates
// nothing once its buffers have grown: the projections, the heads' state
// lookups and the recurrence run every token.
func TestHeadsRoundAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	m, cl := loadCluster(t, oracle.Names[0], 2, 1)
	c := m.Cfg
	l := 0
	for c.IsMLA(l) {
		l++
	}
	in := make([]float32, 2*c.Hidden)
	for i := range in {
		in[i] = float32(i%9-4) / 8
	}
	rd := &model.Round{Layer: l, Kind: model.RoundKDA, Inputs: [][]float32{in},
		Products: []model.Product{{Mat: model.MatOProj, N: 2, Rows: c.KDAWidth(), Unit: c.KDAHeadDim}},
		Seqs:     []model.RoundSeq{{ID: 1 << 61, N: 1, Fresh: true}, {ID: 1<<61 + 1, Lo: 1, N: 1, Fresh: true}}}
	s := cl.servers[0]
	if _, err := s.Round(context.Background(), rd); err != nil {
		t.Fatal(err)
	}
	rd.Seqs[0].Fresh, rd.Seqs[1].Fresh = false, false
	var err error
	if n := testing.AllocsPerRun(20, func() { _, err = s.Round(context.Background(), rd) }); n != 0 || err != nil {
		t.Fatalf("a KDA round allocates %v times (err %v)", n, err)
	}
}

// TestShardedPartialState runs a cluster's states as the engine makes
// them (Model.NewState): rank 0 holds only its own KDA heads. Passes,
// a speculation rolled back, and the whole arrays put together from every
// rank (EachRecurrent, as a state file is written) are the bits of one
// process; the arrays dealt back out into another such state (as a file
// is read) carry on with the same logits; such a state never comes home.
func TestShardedPartialState(t *testing.T) {
	for _, name := range oracle.Names {
		ref, exp := oracle.Load(t, name, model.Options{})
		c := ref.Cfg
		V := c.Vocab
		seq := exp.FullIDs
		if len(seq) < 12 {
			t.Fatalf("%s: a sequence of %d tokens", name, len(seq))
		}
		want := oracle.Teacher(t, ref, seq)
		whole := model.NewState(c, 64)
		if err := ref.ForwardBatch(context.Background(), model.NewScratch(c, 16, 0), []model.Group{{St: whole, Tokens: seq[:9]}}); err != nil {
			t.Fatal(err)
		}
		wantRec := whole.Recurrent()
		for _, ranks := range []int{2, 3} {
			m, cl := loadCluster(t, name, ranks, 1)
			ctx := context.Background()
			sc := model.NewScratch(m.Cfg, 16, 0)
			st := m.NewState(64)
			out := make([]float32, 8*V)
			fwd := func(st *model.State, toks []int) {
				t.Helper()
				if err := m.ForwardBatch(ctx, sc, []model.Group{{St: st, Tokens: toks, All: true, Out: out}}); err != nil {
					t.Fatalf("%s, %d ranks: %v", name, ranks, err)
				}
			}
			check := func(what string, from, n int) {
				t.Helper()
				oracle.SameBits(t, fmt.Sprintf("%s, %d ranks: %s", name, ranks, what), out[:n*V], want[from*V:(from+n)*V], V)
			}
			fwd(st, seq[:5])
			check("rank 0's heads only", 0, 5)
			st.BeginSpeculation(4)
			fwd(st, []int{seq[5], seq[6], (seq[7] + 1) % V, seq[8]})
			if err := m.Rollback(st, 2); err != nil {
				t.Fatal(err)
			}
			fwd(st, seq[7:9])
			check("after a rollback", 7, 2)
			if err := m.Home(ctx, st); err == nil {
				t.Fatalf("%s, %d ranks: a state of rank 0's heads came home", name, ranks)
			}
			var got [][]float32
			if err := m.EachRecurrent(ctx, st, false, func(v []float32) error { got = append(got, slices.Clone(v)); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(wantRec) {
				t.Fatalf("%s, %d ranks: %d arrays, want %d", name, ranks, len(got), len(wantRec))
			}
			for i := range wantRec {
				for j := range wantRec[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(wantRec[i][j]) {
						t.Fatalf("%s, %d ranks: recurrent array %d float %d put together %v, one process %v", name, ranks, i, j, got[i][j], wantRec[i][j])
					}
				}
			}
			// Dealt out into a new state, as a file is read back.
			st2 := m.NewState(64)
			rows, err := st2.Extend(9)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range st.Cached(0, 9) {
				copy(rows[i], r)
			}
			k := 0
			if err := m.EachRecurrent(ctx, st2, true, func(v []float32) error { copy(v, got[k]); k++; return nil }); err != nil {
				t.Fatal(err)
			}
			fwd(st2, seq[9:12])
			check("a state dealt out to the ranks", 9, 3)
			if cl.moves == 0 {
				t.Fatalf("%s, %d ranks: no state's heads were read or dealt out", name, ranks)
			}
		}
	}
}
