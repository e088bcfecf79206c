// Package trunk serves the dense (non-expert) weights of every layer part
// to the forward pass: the parts the memory plan pins stay resident, the
// others stream through a ring arena, each read while the part before it
// computes. It also owns the packed trunk format (k3 pack: every part's
// image in one aligned file, optionally compressed) and the lossless
// compression of BF16 trunk bytes, decoded in place as they are read.
//
// A Layout says where each part's image is read from (the checkpoint's
// shards, or a pack); the planner (internal/engine/planner) decides from
// the layout's costs what to pin; New builds the Trunk that
// model.Load uses as its LayerSource.
package trunk

import (
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Align is the alignment of direct-I/O reads and of every buffer region.
const Align = iox.Align

// Extent and ReadFunc are the I/O layer's: a byte range of a file and
// where it lands in a buffer, and a function that reads one.
type (
	Extent   = iox.Extent
	ReadFunc = iox.ReadFunc
)

// ErrClosed reports a load stopped because the Trunk was closed; it is the
// model's, so that a pass stopped by Close reads the same everywhere.
var ErrClosed = model.ErrClosed

// errBadPack marks a corrupt compressed block as a checkpoint error.
var errBadPack = model.ErrBadCheckpoint

// part is one layer part: its image (the model's layout) and where that
// image is read from.
type part struct {
	*model.PartLayout
	// extents are the reads that fill the image: the checkpoint's
	// (PartLayout.Extents), or one extent of a packed trunk.
	extents []Extent
	comp    *compPart // set when read from a compressed pack
}

// room is the buffer the part is loaded into: its image, or for a
// compressed part the room to decode in place (compRoom).
func (pp *part) room() int64 {
	if pp.comp != nil && len(pp.extents) == 1 {
		n, _ := compRoom(pp.Bytes, pp.comp, pp.extents[0])
		return n
	}
	return pp.Bytes
}

// stored is what one load of the part reads from disk.
func (pp *part) stored() int64 {
	if pp.comp != nil {
		return pp.comp.stored
	}
	return pp.Payload
}

// Layout says where every layer part's image is read from: the
// checkpoint's shards (NewLayout), or a packed trunk (UsePack).
type Layout struct {
	plan  *model.Plan
	parts []part // by model.Unit
}

// NewLayout reads every part from the checkpoint's shards.
func NewLayout(p *model.Plan) *Layout {
	l := &Layout{plan: p, parts: make([]part, len(p.Parts()))}
	for u := range l.parts {
		pl := &p.Parts()[u]
		l.parts[u] = part{PartLayout: pl, extents: pl.Extents}
	}
	return l
}

// Plan returns the model plan the layout serves.
func (l *Layout) Plan() *model.Plan { return l.plan }

// Parts returns what the planner needs of every part, by model.Unit.
func (l *Layout) Parts() []planner.Part {
	out := make([]planner.Part, len(l.parts))
	for u := range l.parts {
		pp := &l.parts[u]
		out[u] = planner.Part{Room: pp.room(), Read: pp.stored(), Payload: pp.Payload}
	}
	return out
}

// Weights summarises the layout's checkpoint for the planner.
func (l *Layout) Weights() *planner.Weights {
	return &planner.Weights{Cfg: l.plan.Cfg, Sizes: l.plan.Sizes(), Parts: l.Parts()}
}

// compressed reports whether any part is read from a compressed pack.
func (l *Layout) compressed() bool {
	for u := range l.parts {
		if l.parts[u].comp != nil {
			return true
		}
	}
	return false
}
