package model

import (
	"context"
	"fmt"
)

// LayerSource provides one part of a layer's matrices for the duration of
// its compute. Acquire may block while the part is read from disk; every
// Acquire is paired with a Release once the part's compute is done. Parts
// are acquired in the order of the forward pass: (0, attention), (0, ffn),
// (1, attention), ...
type LayerSource interface {
	Acquire(ctx context.Context, layer int, part Part) (*LayerMats, error)
	Release(layer int, part Part)
}

// Expert is one routed expert's three matrices (w1 gate, w2 down, w3 up),
// valid until released.
type Expert struct {
	W [3]Linear
}

// ExpertSource provides routed experts for one MoE pass at a time per
// batch. Begin starts reading the batch's experts as soon as routing is
// known; Get waits for one (in any order) and Put releases it; End releases
// whatever the pass still holds (it is always called, errors included).
// Sources keep per-pass state in the batch, so passes of several sessions
// do not interfere.
type ExpertSource interface {
	Begin(ctx context.Context, b *ExpertBatch) error
	Get(ctx context.Context, b *ExpertBatch, i int) (*Expert, error)
	Put(b *ExpertBatch, i int)
	End(b *ExpertBatch)
}

// ExpertBatch is one MoE pass's request: the layer and the experts it
// needs, in the order it will use them. Sources may keep state in it; a
// batch is reused from pass to pass.
type ExpertBatch struct {
	Layer int
	IDs   []int32
	// Uses[i] is the number of rows of the pass that chose IDs[i], so that
	// a cache can count the demand of every row, not one request per pass.
	Uses  []int32
	State any
}

// residentLayers holds every layer's matrices in memory.
type residentLayers struct {
	mats []LayerMats // by layer: both parts bound into one struct
	bufs [][]byte
}

// loadResidentLayers reads every part into its own buffer and binds the
// matrices.
func loadResidentLayers(ctx context.Context, p *Plan, read ReadFunc, alloc Alloc) (*residentLayers, error) {
	r := &residentLayers{mats: make([]LayerMats, p.Cfg.Layers), bufs: make([][]byte, len(p.parts))}
	ld := newPartLoader(p, read)
	defer ld.close()
	var run decodeRun
	for u := range p.parts {
		pp := &p.parts[u]
		buf, err := alloc(pp.room())
		if err != nil {
			return nil, fmt.Errorf("layer %d %s: %w", pp.layer, pp.part, err)
		}
		if _, err := ld.load(ctx, pp, buf, &run, nil); err != nil {
			return nil, fmt.Errorf("layer %d %s: %w", pp.layer, pp.part, err)
		}
		bind(buf, pp.mats, &r.mats[pp.layer])
		r.bufs[u] = buf
	}
	return r, nil
}

func (r *residentLayers) Acquire(ctx context.Context, l int, _ Part) (*LayerMats, error) {
	return &r.mats[l], nil
}
func (r *residentLayers) Release(int, Part) {}

// residentExperts holds every routed expert in memory.
type residentExperts struct {
	experts [][]Expert
}

func loadResidentExperts(ctx context.Context, p *Plan, read ReadFunc, alloc Alloc) (*residentExperts, error) {
	x := p.experts
	r := &residentExperts{experts: make([][]Expert, x.Layers())}
	slot := x.SlotBytes()
	for l := range r.experts {
		n := x.Experts(l)
		if n == 0 {
			continue
		}
		r.experts[l] = make([]Expert, n)
		// One arena per layer, in slots of the index's slot size.
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

func (r *residentExperts) Begin(context.Context, *ExpertBatch) error { return nil }
func (r *residentExperts) Get(_ context.Context, b *ExpertBatch, i int) (*Expert, error) {
	return &r.experts[b.Layer][b.IDs[i]], nil
}
func (r *residentExperts) Put(*ExpertBatch, int) {}
func (r *residentExperts) End(*ExpertBatch)      {}
