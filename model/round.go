package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/tensor"
)

// Round is one exchange of a cluster's forward pass: products of weight
// matrices whose inputs are ready, each computed by every rank for its
// rows. A pass over K3 is a few rounds per layer: the projections that
// read the layer's input, those that read their results, the output
// projection; the experts' gate and up rows, then their down rows.
type Round struct {
	Layer int
	Kind  RoundKind
	// Inputs are the products' input rows (each N × the matrix's columns);
	// several products may read one.
	Inputs   [][]float32
	Products []Product
	// Seqs are the sequences of a RoundKDA round: which rows of its input
	// are whose, and the id every rank keeps its heads of the sequence's
	// state under.
	Seqs []RoundSeq
}

// RoundKind says which weights a round's products use.
type RoundKind uint8

const (
	RoundAttn       RoundKind = iota // the layer's attention part
	RoundFFN                         // the layer's FFN part (dense, or the MoE trunk)
	RoundExpertUp                    // routed experts: their w1 and w3 rows (expert.HalfUp)
	RoundExpertDown                  // routed experts: their w2 rows (expert.HalfDown)
	RoundHead                        // the output head
	// RoundKDA is a KDA layer up to its output projection, split by heads:
	// each rank projects its heads' q, k, v, g, β and decay rows of the
	// layer's input, runs their convolutions and recurrence on its own
	// heads of every sequence's state (Round.Seqs), and returns its heads'
	// gated outputs. Its one product is the output, Unit KDAHeadDim.
	RoundKDA
	NumRoundKinds
)

// Product is one product of a Round: Out = W · In for N input rows, W a
// layer matrix (Mat), an expert's matrix (Expert, W: 0 for w1, 1 for w2,
// 2 for w3) or the output head.
type Product struct {
	Mat    MatID
	Expert int32
	W      uint8
	// F64 sums in float64 (the router: tensor.MatMulF64Acc).
	F64 bool
	// Layer marks a product of a layer matrix (Mat, of the layer's FFN
	// part) in an expert round: the shared experts' down projection rides
	// with the routed experts' gate and up rows instead of taking a round
	// of its own.
	Layer bool
	// GLU makes the product SiTU-GLU(W·In, U·In), U the gate's up
	// partner (GLUPartner; an expert's w3 for its w1): each rank applies
	// it to its own rows, which are the same rows of both matrices, so
	// rank 0 receives half the rows and the activation runs on every
	// rank at once, with the one-process arithmetic element by element.
	GLU bool
	// In indexes Round.Inputs; N is its rows; Rows the whole matrix's
	// rows (Out holds N × Rows, every rank's rows in place; only rank 0
	// has it).
	In, N, Rows int
	Out         []float32
	// Unit is the rows a rank takes whole (0: 1): the ranks split the
	// matrix's Rows/Unit units by RowRange. A KDA head's rows are one unit,
	// so that a head's projections, state and output are one rank's; a
	// Unit of Rows gives every row to rank 0 (the KDA decay's first
	// projection, which every rank holds whole).
	Unit int
	// Pick, if set (N long), makes the product's input rows rows Pick[i]
	// of Inputs[In] instead of its first N: the experts of a round share
	// one input of the distinct rows that chose any of them, so a row is
	// sent once per round, not once per expert it chose.
	Pick []int32
}

// GLUPartner returns the up projection that a GLU product of gate matrix
// mat pairs with, and whether mat is a gate.
func GLUPartner(mat MatID) (MatID, bool) {
	switch mat {
	case MatGateProj:
		return MatUpProj, true
	case MatSharedGate:
		return MatSharedUp, true
	}
	return 0, false
}

// Ranks is a cluster's other ranks as rank 0 sees them.
type Ranks interface {
	// Size returns the number of ranks, rank 0 included.
	Size() int
	// Round has every other rank compute its rows of every product of rd
	// while local computes rank 0's, and places every rank's rows in the
	// products' Out. An error (a rank failed, or did not answer in time)
	// must name the rank; the pass then fails.
	Round(ctx context.Context, rd *Round, local func() error) error
}

// errNoRanks reports a sharded plan loaded without the rest of its cluster.
var errNoRanks = errors.New("model: a plan of one rank of a cluster needs Options.Ranks")

// SliceRows returns the rows rank computes of product pr: its units'
// (RowRange of the Rows/Unit units; rank 0 keeps kv_b whole, which no
// round carries).
func SliceRows(pr *Product, rank, ranks int) (lo, hi int) {
	return UnitRange(pr.Rows, pr.Unit, rank, ranks)
}

// UnitRange returns rank's rows [lo, hi) of a matrix of rows rows split
// over ranks in whole units of unit rows (0 or 1: rows; rows a multiple of
// unit).
func UnitRange(rows, unit, rank, ranks int) (lo, hi int) {
	if unit <= 1 {
		return RowRange(rows, rank, ranks)
	}
	lo, hi = RowRange(rows/unit, rank, ranks)
	return lo * unit, hi * unit
}

// RoundWork is what computing a round's slices reuses from round to round,
// so that a pass allocates nothing once its buffers have grown.
type RoundWork struct {
	buf    []float32
	glu    []float32 // a GLU product's up rows
	picked []float32 // a product's picked input rows
	out    [][]float32
	ids    []int32
	batch  expert.Batch

	// A batch of expert halves begun before its round comes
	// (PrefetchExperts): its reads run while the rank computes other
	// rounds.
	pend                expert.Batch
	pendIDs             []int32
	pendOn              bool
	pendLayer, pendHalf int

	// A RoundKDA round's: where its sequences' heads are, its
	// projections' rows, the heads it runs on, its recurrence.
	states headStates
	kda    []float32
	kst    []kdaState
	hjob   headJob
}

// Prefetcher is implemented by Ranks that can tell the other ranks which
// experts' halves a coming round needs, so that their reads start while
// they compute the rounds before it.
type Prefetcher interface {
	Prefetch(ctx context.Context, layer, half int, experts []int32) error
}

// PrefetchExperts begins, in w, the batch of half (expert.HalfUp or
// HalfDown) of experts of layer (in the order a round will use them): the
// expert source starts reading them now, and the next expert round of w
// with exactly these takes the batch instead of beginning its own. A batch
// begun before is ended first. An error leaves nothing begun (the round
// will begin its own and report what fails).
func (m *Model) PrefetchExperts(ctx context.Context, w *RoundWork, layer, half int, experts []int32) error {
	m.EndPrefetch(w)
	w.pendIDs = w.pendIDs[:0]
	for _, e := range experts {
		w.pendIDs = append(w.pendIDs, 2*e+int32(half))
	}
	return m.beginPending(ctx, w, layer, half)
}

// beginPending begins the batch of w.pendIDs.
func (m *Model) beginPending(ctx context.Context, w *RoundWork, layer, half int) error {
	w.pend.Layer, w.pend.IDs, w.pend.Uses = layer, w.pendIDs, nil
	if err := m.experts.Begin(ctx, &w.pend); err != nil {
		m.experts.End(&w.pend)
		return err
	}
	w.pendOn, w.pendLayer, w.pendHalf = true, layer, half
	return nil
}

// EndPrefetch ends the batch PrefetchExperts began in w, if any.
func (m *Model) EndPrefetch(w *RoundWork) {
	if w.pendOn {
		m.experts.End(&w.pend)
		w.pendOn = false
	}
}

// Slices computes this model's rows of every product of rd (its plan's
// rank) and returns them, product i's N × its rows (row-major) in slice i,
// valid until w is used again. mats is the layer part a layer round's
// matrices come from (the caller holds it); an expert round takes this
// rank's halves of the experts from the model's expert source, each once;
// a head round its rows of the output head.
func (m *Model) Slices(ctx context.Context, rd *Round, mats *LayerMats, w *RoundWork) ([][]float32, error) {
	rank, ranks := m.Plan.Rank()
	total := 0
	for i := range rd.Products {
		lo, hi := SliceRows(&rd.Products[i], rank, ranks)
		total += rd.Products[i].N * (hi - lo)
	}
	if cap(w.buf) < total {
		w.buf = make([]float32, total, total+total/4)
	}
	w.out = w.out[:0]
	off := 0
	for i := range rd.Products {
		lo, hi := SliceRows(&rd.Products[i], rank, ranks)
		n := rd.Products[i].N * (hi - lo)
		w.out = append(w.out, w.buf[off:off+n:off+n])
		off += n
	}
	var err error
	switch rd.Kind {
	case RoundAttn, RoundFFN:
		if mats == nil {
			return nil, fmt.Errorf("model: round of layer %d %s without its matrices", rd.Layer, rd.Kind)
		}
		for i := range rd.Products {
			if err = m.layerSlice(rd, &rd.Products[i], mats, w, w.out[i], rank, ranks); err != nil {
				return nil, err
			}
		}
	case RoundKDA:
		if mats == nil {
			return nil, fmt.Errorf("model: round of layer %d %s without its matrices", rd.Layer, rd.Kind)
		}
		err = m.kdaHeads(rd, mats, w, w.out)
	case RoundHead:
		head := Linear{Dense: m.lmHead}
		for i := range rd.Products {
			if err = m.slice(rd, &rd.Products[i], &head, w.out[i], rank, ranks, w); err != nil {
				return nil, err
			}
		}
	case RoundExpertUp, RoundExpertDown:
		// Layer products first: they run while the experts' reads finish.
		for i := range rd.Products {
			pr := &rd.Products[i]
			if !pr.Layer {
				continue
			}
			if mats == nil {
				return nil, fmt.Errorf("model: expert round of layer %d with a layer product and no layer matrices", rd.Layer)
			}
			if err = m.layerSlice(rd, pr, mats, w, w.out[i], rank, ranks); err != nil {
				return nil, err
			}
		}
		err = m.expertSlices(ctx, rd, w, rank, ranks)
	default:
		err = fmt.Errorf("model: round of unknown kind %d", rd.Kind)
	}
	if err != nil {
		return nil, err
	}
	return w.out, nil
}

// layerSlice computes one product of a layer matrix from mats, and its
// SiTU-GLU with the up partner's rows when it is a GLU product.
func (m *Model) layerSlice(rd *Round, pr *Product, mats *LayerMats, w *RoundWork, dst []float32, rank, ranks int) error {
	lin := mats.Field(pr.Mat)
	if lin == nil {
		return fmt.Errorf("model: round of layer %d: no matrix %d", rd.Layer, pr.Mat)
	}
	if !pr.GLU {
		return m.slice(rd, pr, lin, dst, rank, ranks, w)
	}
	upMat, ok := GLUPartner(pr.Mat)
	var up *Linear
	if ok {
		up = mats.Field(upMat)
	}
	if up == nil {
		return fmt.Errorf("model: round of layer %d: a GLU product of matrix %d, which has no up partner", rd.Layer, pr.Mat)
	}
	return m.gluSlice(rd, pr, lin, up, w, dst, rank, ranks)
}

// gluSlice computes SiTU-GLU(gate·in, up·in) on this rank's rows of both.
func (m *Model) gluSlice(rd *Round, pr *Product, gate, up *Linear, w *RoundWork, dst []float32, rank, ranks int) error {
	if pr.F64 {
		return fmt.Errorf("model: a GLU product summed in float64")
	}
	if err := m.slice(rd, pr, gate, dst, rank, ranks, w); err != nil {
		return err
	}
	if cap(w.glu) < len(dst) {
		w.glu = make([]float32, len(dst), len(dst)+len(dst)/4)
	}
	u := w.glu[:len(dst)]
	if err := m.slice(rd, pr, up, u, rank, ranks, w); err != nil {
		return err
	}
	situGLU(dst, dst, u, m.Cfg.SituBeta, m.Cfg.SituLinearBeta)
	return nil
}

// pick gathers pr's input rows (Pick) of cols floats each from in into
// the work's scratch, checking every pick against in.
func (work *RoundWork) pick(in []float32, pr *Product, cols int) ([]float32, error) {
	if len(pr.Pick) != pr.N || cols <= 0 {
		return nil, fmt.Errorf("model: a product of %d rows picks %d", pr.N, len(pr.Pick))
	}
	// A row chooses an expert once, so a product picks at most every
	// row of its input once: what it gathers is at most the input.
	rows := len(in) / cols
	if pr.N > rows {
		return nil, fmt.Errorf("model: a product picks %d rows of an input of %d", pr.N, rows)
	}
	n := pr.N * cols
	if cap(work.picked) < n {
		work.picked = make([]float32, n, n+n/4)
	}
	out := work.picked[:n]
	for i, r := range pr.Pick {
		if r < 0 || int(r) >= rows {
			return nil, fmt.Errorf("model: a product picks row %d of an input of %d rows", r, rows)
		}
		copy(out[i*cols:(i+1)*cols], in[int(r)*cols:(int(r)+1)*cols])
	}
	return out, nil
}

// slice computes one product with this rank's rows w.
func (m *Model) slice(rd *Round, pr *Product, w *Linear, dst []float32, rank, ranks int, work *RoundWork) error {
	if pr.In < 0 || pr.In >= len(rd.Inputs) {
		return fmt.Errorf("model: product reads input %d of %d", pr.In, len(rd.Inputs))
	}
	lo, hi := SliceRows(pr, rank, ranks)
	if hi == lo {
		return nil // none of this rank's (a matrix every rank holds whole, computed by rank 0)
	}
	rows := w.Rows()
	if rows != hi-lo {
		return fmt.Errorf("model: a product of %d rows needs rows [%d, %d) of rank %d of %d; this rank holds %d", pr.Rows, lo, hi, rank, ranks, rows)
	}
	if rows == 0 || pr.N == 0 {
		return nil
	}
	in := rd.Inputs[pr.In]
	if pr.Pick != nil {
		var err error
		if in, err = work.pick(in, pr, w.Cols()); err != nil {
			return err
		}
	}
	if len(in) < pr.N*w.Cols() || len(dst) < pr.N*rows {
		return fmt.Errorf("model: product of a %dx%d matrix over %d rows: %d inputs, %d outputs", rows, w.Cols(), pr.N, len(in), len(dst))
	}
	if pr.F64 {
		if w.IsMX {
			return fmt.Errorf("model: a float64 product needs a dense matrix")
		}
		tensor.MatMulF64Acc(m.pool, dst, w.Dense, in, pr.N)
		return nil
	}
	w.MatMul(m.pool, dst, in, pr.N)
	return nil
}

// expertSlices computes an expert round's products from this rank's halves
// of the experts, each fetched once from the expert source.
func (m *Model) expertSlices(ctx context.Context, rd *Round, w *RoundWork, rank, ranks int) error {
	half := int32(expert.HalfUp)
	if rd.Kind == RoundExpertDown {
		half = expert.HalfDown
	}
	// The products come grouped by expert (the pass adds them so); one id
	// per group.
	w.ids = w.ids[:0]
	for i := range rd.Products {
		if rd.Products[i].Layer {
			continue
		}
		id := 2*rd.Products[i].Expert + half
		if n := len(w.ids); n == 0 || w.ids[n-1] != id {
			w.ids = append(w.ids, id)
		}
	}
	b := &w.batch
	if w.pendOn && w.pendLayer == rd.Layer && w.pendHalf == int(half) && slices.Equal(w.pendIDs, w.ids) {
		// Begun ahead (PrefetchExperts): its reads have been running.
		b, w.pendOn = &w.pend, false
	} else {
		m.EndPrefetch(w)
		b.Layer, b.IDs, b.Uses = rd.Layer, w.ids, nil
		if err := m.experts.Begin(ctx, b); err != nil {
			m.experts.End(b)
			return fmt.Errorf("experts: %w", err)
		}
	}
	done := false
	defer func() {
		if !done {
			m.experts.End(b)
		}
	}()
	k := 0
	skipLayer := func() {
		for k < len(rd.Products) && rd.Products[k].Layer {
			k++
		}
	}
	skipLayer()
	for i, id := range w.ids {
		ex, err := m.experts.Get(ctx, b, i)
		if err != nil {
			if errors.Is(err, expert.ErrClosed) {
				return ErrClosed
			}
			return fmt.Errorf("expert %d: %w", id/2, err)
		}
		for ; k < len(rd.Products) && 2*rd.Products[k].Expert+half == id; skipLayer() {
			pr := &rd.Products[k]
			k++
			if pr.W > 2 || (pr.GLU && pr.W != 0) {
				m.experts.Put(b, i)
				return fmt.Errorf("model: expert matrix %d (GLU %v)", pr.W, pr.GLU)
			}
			var err error
			if pr.GLU {
				err = m.gluSlice(rd, pr, &ex.W[0], &ex.W[2], w, w.out[k-1], rank, ranks)
			} else {
				err = m.slice(rd, pr, &ex.W[pr.W], w.out[k-1], rank, ranks, w)
			}
			if err != nil {
				m.experts.Put(b, i)
				return err
			}
		}
		m.experts.Put(b, i)
	}
	if k != len(rd.Products) {
		return fmt.Errorf("model: an expert round's products are not grouped by expert")
	}
	m.experts.End(b)
	done = true
	if half == expert.HalfUp {
		// The same experts' down halves come next, once rank 0 has every
		// rank's up rows: read them meanwhile (id 2e+1 after 2e).
		w.pendIDs = w.pendIDs[:0]
		for _, id := range w.ids {
			w.pendIDs = append(w.pendIDs, id+1)
		}
		m.beginPending(ctx, w, rd.Layer, expert.HalfDown)
	}
	return nil
}

// Place copies one rank's rows of every product (slices[i]: product i's N
// × its rows, as Slices returns them) into the products' Out.
func Place(rd *Round, rank, ranks int, slices [][]float32) {
	for i := range rd.Products {
		pr := &rd.Products[i]
		lo, hi := SliceRows(pr, rank, ranks)
		w := hi - lo
		if w == 0 {
			continue
		}
		s := slices[i]
		for t := 0; t < pr.N; t++ {
			copy(pr.Out[t*pr.Rows+lo:t*pr.Rows+hi], s[t*w:(t+1)*w])
		}
	}
}

func (k RoundKind) String() string {
	switch k {
	case RoundAttn:
		return "attention"
	case RoundFFN:
		return "ffn"
	case RoundExpertUp:
		return "experts (gate, up)"
	case RoundExpertDown:
		return "experts (down)"
	case RoundHead:
		return "head"
	case RoundKDA:
		return "kda heads"
	}
	return fmt.Sprintf("round kind %d", k)
}

// sameSlice reports whether a and b are the same slice (start and length).
func sameSlice(a, b []float32) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// The pass's side of rounds. In one process a product runs at once; in a
// cluster the pass collects a round's products and finishes the round:
// every rank's rows, rank 0's computed here meanwhile, land in the
// outputs.

// sharded reports whether the pass's products are split over ranks.
func (p *pass) sharded() bool { return p.m.ranks != nil }

// round starts a round of kind over layer l.
func (p *pass) round(l int, kind RoundKind) *Round {
	rd := &p.sc.round
	clear(rd.Inputs)
	clear(rd.Products)
	*rd = Round{Layer: l, Kind: kind, Inputs: rd.Inputs[:0], Products: rd.Products[:0], Seqs: rd.Seqs[:0]}
	return rd
}

// prod adds out = w·in (n rows) to rd, or in one process computes it now.
// out holds n rows of the whole matrix's rows.
func (p *pass) prod(rd *Round, w *Linear, id MatID, out, in []float32, n int) {
	if !p.sharded() {
		w.MatMul(p.m.pool, out, in, n)
		return
	}
	rows := len(out) / max(n, 1)
	p.add(rd, Product{Mat: id, N: n, Rows: rows, Unit: SplitUnit(p.c, id, rows), Out: out}, in)
}

// glu makes g = SiTU-GLU(gate·in, up·in) for n rows: in one process now
// (u is the up rows' scratch), in a cluster as one GLU product of rd,
// which every rank applies to its own rows.
func (p *pass) glu(rd *Round, gate, up *Linear, gateID MatID, g, u, in []float32, n int) {
	if !p.sharded() {
		gate.MatMul(p.m.pool, g, in, n)
		up.MatMul(p.m.pool, u, in, n)
		situGLU(g, g, u, p.c.SituBeta, p.c.SituLinearBeta)
		return
	}
	p.add(rd, Product{Mat: gateID, GLU: true, N: n, Rows: len(g) / max(n, 1), Out: g}, in)
}

// add appends a product reading in to rd (in cluster passes).
func (p *pass) add(rd *Round, pr Product, in []float32) {
	pr.In = -1
	for i, x := range rd.Inputs {
		if sameSlice(x, in) {
			pr.In = i
			break
		}
	}
	if pr.In < 0 {
		pr.In = len(rd.Inputs)
		rd.Inputs = append(rd.Inputs, in)
	}
	rd.Products = append(rd.Products, pr)
}

// finish runs rd over the cluster (nothing to do in one process): rank
// 0's rows from mats (the held part) or its expert halves, the others'
// from their ranks.
func (p *pass) finish(rd *Round, mats *LayerMats) error {
	if !p.sharded() || len(rd.Products) == 0 {
		return nil
	}
	m := p.m
	local := &p.sc.local
	*local = localRound{p: p, rd: rd, mats: mats}
	if p.sc.localRun == nil {
		p.sc.localRun = local.run // bound once: a method value allocates
	}
	err := m.ranks.Round(p.ctx, rd, p.sc.localRun)
	*local = localRound{}
	if err != nil {
		return fmt.Errorf("%s round: %w", rd.Kind, err)
	}
	return nil
}

// localRound computes rank 0's share of a round (a struct, not a closure,
// so that a round allocates nothing).
type localRound struct {
	p    *pass
	rd   *Round
	mats *LayerMats
}

func (l *localRound) run() error {
	sl, err := l.p.m.Slices(l.p.ctx, l.rd, l.mats, &l.p.sc.rwork)
	if err != nil {
		return err
	}
	_, ranks := l.p.m.Plan.Rank()
	Place(l.rd, 0, ranks, sl)
	return nil
}
