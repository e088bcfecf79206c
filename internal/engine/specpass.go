package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/engine/sched"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/model"
)

// specStep is a decoding step that offers drafts: its request's tokens are
// the pending token and the drafts, of which the batcher verifies as many
// as the policy grants (granted), with a rollback buffer lent for the pass
// (buf; nil when none were granted).
type specStep struct {
	on      bool
	surv    []float64 // the drafts' survival chances (specpolicy.Survival)
	force   bool      // a fixed draft length: verify them all
	granted int
	buf     *model.SpecBuffer
}

// specPool holds the rollback buffers the budget reserves; limit < 0
// means no budget: buffers are made as they are needed.
type specPool struct {
	mu    sync.Mutex
	free  []*model.SpecBuffer
	limit int
	made  int
}

func newSpecPool(limit int) *specPool { return &specPool{limit: limit} }

// get takes a buffer, or nil when every one is lent.
func (p *specPool) get() *model.SpecBuffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	if p.limit < 0 || p.made < p.limit {
		p.made++
		return new(model.SpecBuffer)
	}
	return nil
}

func (p *specPool) put(b *model.SpecBuffer) {
	if b == nil {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// available returns how many buffers get would hand out now (−1: no
// bound).
func (p *specPool) available() int {
	if p.limit < 0 {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) + p.limit - p.made
}

// SpecCostForTests, if set, replaces the measured pass costs of every
// engine opened afterwards with a fixed model, so that a test's
// SpeculateAuto choices do not depend on the machine. Tests only.
var SpecCostForTests atomic.Pointer[specpolicy.Cost]

// passCounters are the engine's cumulative counters a pass moves, for the
// calibration.
type passCounters struct {
	bytes, expertBytes int64
	io                 time.Duration
	union, moePasses   int64
}

// passSpec is the batcher's side of speculative decoding: the policy's
// choice of draft rows for every pass, and the calibration of its cost
// model from the passes run. Only the batcher goroutine uses it, but for
// the rollback times sequences report (specNanos, specCount).
type passSpec struct {
	pool     *specPool
	cal      *specpolicy.Calibration
	chooser  specpolicy.Chooser
	counters func() passCounters
	last     passCounters
	offers   []specpolicy.Offer
	ks       []int
	idx      []int // takes with offers

	specNanos, specCount atomic.Int64 // state copies and rollbacks, reported by sequences
	granted, passes      atomic.Int64 // draft rows granted, passes with a speculating sequence

	fixed *specpolicy.Cost // tests: a fixed cost instead of the calibration's
}

// left is the rows the scheduler sees a request ask for: a step that
// offers drafts asks for one row, its pending token, as any decoding step
// (its drafts are granted after, by the policy, over the whole pass).
func (b *batcher) left(r *request) int {
	if r.spec.on {
		return 1
	}
	return len(r.tokens) - r.fed
}

// grantDrafts lets the policy decide, over the whole pass, how many drafts
// each offering request in it verifies; it widens their takes, trims their
// tokens, and begins their speculation in a lent rollback buffer.
func (b *batcher) grantDrafts() {
	ps := b.spec
	if ps == nil {
		return
	}
	ps.offers, ps.idx = ps.offers[:0], ps.idx[:0]
	rows, decoding := 0, 0
	for i, t := range b.takes {
		r := b.inPass[i]
		rows += t.Rows
		if r.spec.on || len(r.tokens)-r.fed == 1 {
			decoding++
		}
		if r.spec.on {
			ps.idx = append(ps.idx, i)
			ps.offers = append(ps.offers, specpolicy.Offer{Survival: r.spec.surv, Force: r.spec.force})
		}
	}
	if len(ps.offers) == 0 {
		return
	}
	ready := ps.cal.Ready() || ps.fixed != nil
	if !ready {
		// No cost model yet (the first passes): only forced drafts.
		for k := range ps.offers {
			if !ps.offers[k].Force {
				ps.offers[k].Survival = nil
			}
		}
	}
	c := ps.cal.Cost()
	if ps.fixed != nil {
		c = *ps.fixed
	}
	ps.ks = ps.chooser.Choose(ps.ks[:0], specpolicy.Pass{Rows: rows, Tokens: float64(decoding), MaxRows: b.passRows, MaxSpec: ps.pool.available()}, ps.offers, &c)
	spec := false
	for k, i := range ps.idx {
		r := b.inPass[i]
		n := ps.ks[k]
		if n > 0 {
			buf := ps.pool.get()
			if buf == nil {
				n = 0
			} else {
				start := time.Now()
				r.st.BeginSpeculationIn(buf, 1+n)
				ps.specNanos.Add(int64(time.Since(start)))
				r.spec.buf = buf
				spec = true
				ps.granted.Add(int64(n))
			}
		}
		r.spec.granted = n
		r.tokens = r.tokens[:r.fed+1+n]
		b.takes[i] = sched.Take{Index: b.takes[i].Index, Rows: 1 + n}
	}
	if spec {
		ps.passes.Add(1)
	}
}

// passDone feeds a finished pass to the calibration.
func (b *batcher) passDone(rows int, d time.Duration) {
	ps := b.spec
	if ps == nil {
		return
	}
	now := ps.counters()
	o := specpolicy.Observation{Rows: rows, Seconds: d.Seconds(),
		Bytes: float64(now.bytes - ps.last.bytes), IOSeconds: (now.io - ps.last.io).Seconds(),
		ExpertBytes: float64(now.expertBytes - ps.last.expertBytes)}
	if n := now.moePasses - ps.last.moePasses; n > 0 {
		o.Union = float64(now.union-ps.last.union) / float64(n)
	}
	ps.last = now
	ps.cal.Observe(o)
	if n := ps.specCount.Swap(0); n > 0 {
		ps.cal.ObserveSpec(time.Duration(ps.specNanos.Swap(0)).Seconds() / float64(n))
	}
}

// newPassSpec sets up speculation for the plan: the rollback buffers it
// reserves (every one it likes without a budget), and a calibration
// starting from the plan's pass shape. Nil when the budget reserved none.
func (e *Engine) newPassSpec() *passSpec {
	limit := -1
	e.specMax = -1
	if e.opts.RAMBudget > 0 {
		limit = e.mem.SpecSlots
		e.specMax = max(e.mem.SpecRows-1, 0)
		if limit == 0 {
			return nil
		}
	}
	c := e.m.Cfg
	hit := 1.0
	var expertFull float64
	if e.xs != nil {
		x := e.m.Plan.Experts()
		total := float64(x.Count())
		hit = min(1, float64(e.mem.CacheSlots)/max(total, 1))
		moe := max(total/float64(max(c.Experts, 1)), 1)
		expertFull = float64(x.ExpertBytes()) * moe
	}
	ps := &passSpec{pool: newSpecPool(limit),
		cal: specpolicy.NewCalibration(float64(e.mem.TrunkBytesPerPass), expertFull, c.Experts, c.TopK, hit)}
	ps.counters = e.passCounters
	if c := SpecCostForTests.Load(); c != nil {
		ps.fixed = c
	}
	return ps
}

// passCounters reads the counters a pass moves.
func (e *Engine) passCounters() passCounters {
	rs := e.reader.Stats()
	ms := e.m.Stats()
	pc := passCounters{bytes: rs.BytesRead, io: rs.BusyTime, union: ms.ExpertUnion, moePasses: ms.MoELayerPasses}
	if e.xs != nil {
		pc.expertBytes = e.xs.ExpertStats().BytesRead
	}
	return pc
}
