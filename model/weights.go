package model

import (
	"context"
	"fmt"
)

// LayerSource provides a layer's matrices for the duration of its compute.
// Acquire may block while the layer is read from disk; every Acquire is
// paired with a Release once the layer's compute is done.
type LayerSource interface {
	Acquire(ctx context.Context, layer int) (*LayerMats, error)
	Release(layer int)
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
	mats []LayerMats
	bufs [][]byte
}

// loadResidentLayers reads every layer's run into its own buffer and binds
// the matrices.
func loadResidentLayers(ctx context.Context, p *Plan, read func(ctx context.Context, e Extent, dst []byte) error) (*residentLayers, error) {
	r := &residentLayers{mats: make([]LayerMats, len(p.layers)), bufs: make([][]byte, len(p.layers))}
	for l := range p.layers {
		lp := &p.layers[l]
		buf := make([]byte, lp.bytes)
		for _, e := range lp.extents {
			if err := read(ctx, e, buf[e.BufOff:e.BufOff+e.Size]); err != nil {
				return nil, fmt.Errorf("layer %d: %w", l, err)
			}
		}
		bind(buf, lp.mats, &r.mats[l])
		r.bufs[l] = buf
	}
	return r, nil
}

func (r *residentLayers) Acquire(ctx context.Context, l int) (*LayerMats, error) {
	return &r.mats[l], nil
}
func (r *residentLayers) Release(int) {}

// residentExperts holds every routed expert in memory.
type residentExperts struct {
	experts [][]Expert
}

func loadResidentExperts(ctx context.Context, p *Plan, read func(ctx context.Context, e Extent, dst []byte) error) (*residentExperts, error) {
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
					if err := read(ctx, x, buf[x.BufOff:x.BufOff+x.Size]); err != nil {
						return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
					}
				}
				bindExpert(buf, &loc.irr.mats, &r.experts[l][e].W)
				continue
			}
			buf := make([]byte, loc.Size)
			if err := read(ctx, Extent{File: loc.File, Off: loc.Off, Size: loc.Size}, buf); err != nil {
				return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
			}
			bindExpert(buf, &ep.template, &r.experts[l][e].W)
		}
	}
	return r, nil
}

func (r *residentExperts) Prefetch(context.Context, int, []int32) {}
func (r *residentExperts) Acquire(ctx context.Context, l, e int) (*Expert, error) {
	return &r.experts[l][e], nil
}
func (r *residentExperts) Release(*Expert) {}
