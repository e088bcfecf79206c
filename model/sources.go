package model

import (
	"context"
	"fmt"

	"github.com/k3go/k3/expert"
)

// LayerSource provides one part of a layer's matrices for the duration of
// its compute. Acquire may block while the part is read from disk; every
// Acquire is paired with a Release once the part's compute is done. Parts
// are acquired in the order of the forward pass: (0, attention), (0, ffn),
// (1, attention), ... The engine's source is the streaming trunk
// (internal/engine/trunk); Load's default reads every part into memory.
type LayerSource interface {
	Acquire(ctx context.Context, layer int, part Part) (*LayerMats, error)
	Release(layer int, part Part)
}

// PassLocker is implemented by layer sources that serve one forward pass
// at a time (a streaming trunk): ForwardBatch brackets every pass with
// BeginPass and EndPass.
type PassLocker interface {
	BeginPass()
	EndPass()
}

// residentLayers holds every layer's matrices in memory: the simplest
// LayerSource, read straight from the checkpoint's extents.
type residentLayers struct {
	mats []LayerMats // by layer: both parts bound into one struct
}

// loadResidentLayers reads every part into its own buffer and binds the
// matrices.
func loadResidentLayers(ctx context.Context, p *Plan, read ReadFunc, alloc Alloc) (*residentLayers, error) {
	r := &residentLayers{mats: make([]LayerMats, p.Cfg.Layers)}
	for u := range p.parts {
		pl := &p.parts[u]
		buf, err := alloc(pl.Bytes)
		if err != nil {
			return nil, fmt.Errorf("layer %d %s: %w", pl.Layer, pl.Part, err)
		}
		for _, e := range pl.Extents {
			if err := read(ctx, e, buf); err != nil {
				return nil, fmt.Errorf("layer %d %s: %w", pl.Layer, pl.Part, err)
			}
		}
		pl.Bind(buf, &r.mats[pl.Layer])
	}
	return r, nil
}

func (r *residentLayers) Acquire(ctx context.Context, l int, _ Part) (*LayerMats, error) {
	return &r.mats[l], nil
}
func (r *residentLayers) Release(int, Part) {}

// Alloc returns a buffer of n bytes for weights (the engine passes an
// aligned, off-heap allocator).
type Alloc func(n int64) ([]byte, error)

// ensure the expert package's sources fit the model's use of them.
var _ expert.Source = (*expert.Resident)(nil)
