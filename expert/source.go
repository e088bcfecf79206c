package expert

import (
	"context"
	"fmt"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/quant"
)

// Expert is one routed expert's three matrices (w1 gate, w2 down, w3 up),
// bound in place to the bytes that hold them (packed MXFP4 or dense),
// valid until the source releases them.
type Expert struct {
	W [3]quant.Linear
}

// Batch is one MoE pass's request: the layer and the experts it needs, in
// the order the pass will use them. Sources may keep per-pass state in it,
// so that passes of several sequences do not interfere; a batch is reused
// from pass to pass.
type Batch struct {
	Layer int
	IDs   []int32
	// Uses[i] is the number of rows of the pass that chose IDs[i], so that
	// a cache counts the demand of every row, not one request per pass.
	Uses  []int32
	State any
}

// Source provides routed experts to one MoE pass at a time per batch.
// Begin starts reading the batch's experts as soon as routing is known;
// Get waits for one (in any order) and Put releases it; End releases
// whatever the pass still holds (it is always called, errors included).
type Source interface {
	Begin(ctx context.Context, b *Batch) error
	Get(ctx context.Context, b *Batch, i int) (*Expert, error)
	Put(b *Batch, i int)
	End(b *Batch)
}

// Residency is implemented by sources that can tell, without counting a
// request, whether an expert is in memory already: a pass then computes
// those first while the reads of the others run.
type Residency interface {
	Resident(layer int, id int32) bool
}

// Stats is implemented by sources that count their work.
type Stats interface {
	ExpertStats() StreamStats
}

// Resident holds every routed expert of a checkpoint in memory.
type Resident struct {
	experts [][]Expert
}

// LoadResident reads every expert of x through read into buffers from
// alloc (one per layer, in slots of x.SlotBytes) and binds it.
func LoadResident(ctx context.Context, x *Index, read iox.ReadFunc, alloc func(n int64) ([]byte, error)) (*Resident, error) {
	r := &Resident{experts: make([][]Expert, x.Layers())}
	slot := x.SlotBytes()
	for l := range r.experts {
		n := x.Experts(l)
		if n == 0 {
			continue
		}
		r.experts[l] = make([]Expert, n)
		arena, err := alloc(int64(n) * slot)
		if err != nil {
			return nil, fmt.Errorf("layer %d experts: %w", l, err)
		}
		for e := 0; e < n; e++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			payload, err := x.Load(ctx, read, l, e, arena[int64(e)*slot:int64(e+1)*slot])
			if err != nil {
				return nil, err
			}
			x.Layout(l, e).Bind(payload, &r.experts[l][e].W)
		}
	}
	return r, nil
}

// Begin implements Source.
func (r *Resident) Begin(context.Context, *Batch) error { return nil }

// Get implements Source.
func (r *Resident) Get(_ context.Context, b *Batch, i int) (*Expert, error) {
	return &r.experts[b.Layer][b.IDs[i]], nil
}

// Put implements Source.
func (r *Resident) Put(*Batch, int) {}

// End implements Source.
func (r *Resident) End(*Batch) {}
