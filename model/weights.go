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
	W      [3]Linear
	handle any
}

// ExpertSource provides routed experts. Prefetch starts reading a layer's
// selected experts as soon as routing is known; Acquire waits for one.
type ExpertSource interface {
	Prefetch(ctx context.Context, layer int, experts []int32)
	Acquire(ctx context.Context, layer, expert int) (*Expert, error)
	Release(*Expert)
}

// residentLayers holds every layer's matrices in memory.
type residentLayers struct {
	mats []LayerMats // by layer: both parts bound into one struct
	bufs [][]byte
}

// loadResidentLayers reads every part into its own buffer and binds the
// matrices.
func loadResidentLayers(ctx context.Context, p *Plan, read ReadFunc) (*residentLayers, error) {
	r := &residentLayers{mats: make([]LayerMats, p.Cfg.Layers), bufs: make([][]byte, len(p.parts))}
	for u := range p.parts {
		pp := &p.parts[u]
		buf := make([]byte, pp.bytes)
		for _, e := range pp.extents {
			if err := read(ctx, e, buf); err != nil {
				return nil, fmt.Errorf("layer %d %s: %w", pp.layer, pp.part, err)
			}
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

func loadResidentExperts(ctx context.Context, p *Plan, read ReadFunc) (*residentExperts, error) {
	ep := &p.experts
	r := &residentExperts{experts: make([][]Expert, len(ep.locs))}
	for l, locs := range ep.locs {
		if len(locs) == 0 {
			continue
		}
		r.experts[l] = make([]Expert, len(locs))
		for e, loc := range locs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if loc.irr != nil {
				buf := make([]byte, loc.irr.bytes)
				for _, x := range loc.irr.extents {
					if err := read(ctx, x, buf); err != nil {
						return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
					}
				}
				bindExpert(buf, &loc.irr.mats, &r.experts[l][e].W)
				continue
			}
			x, n := singleExtent(loc.File, loc.Off, loc.Size)
			buf := make([]byte, n)
			if err := read(ctx, x, buf); err != nil {
				return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
			}
			bindExpert(buf[x.BufOff:x.BufOff+loc.Size], &ep.template, &r.experts[l][e].W)
		}
	}
	return r, nil
}

func (r *residentExperts) Prefetch(context.Context, int, []int32) {}
func (r *residentExperts) Acquire(ctx context.Context, l, e int) (*Expert, error) {
	return &r.experts[l][e], nil
}
func (r *residentExperts) Release(*Expert) {}
