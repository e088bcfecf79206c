package expert

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// ErrLayout reports expert tensors that are missing or do not describe the
// expected matrices.
var ErrLayout = errors.New("bad expert tensors")

// Name returns the stored name of expert e's matrix w (1, 2 or 3) in layer
// l, with suffix "weight" (dense), "weight_packed" or "weight_scale"
// (MXFP4).
func Name(l, e, w int, suffix string) string {
	// Appended by hand: Build names 1.5 million tensors for the released
	// checkpoint, and fmt.Sprintf cost a fifth of a second of it.
	var buf [112]byte
	b := append(buf[:0], "language_model.model.layers."...)
	b = strconv.AppendInt(b, int64(l), 10)
	b = append(b, ".block_sparse_moe.experts."...)
	b = strconv.AppendInt(b, int64(e), 10)
	b = append(b, ".w"...)
	b = strconv.AppendInt(b, int64(w), 10)
	b = append(b, '.')
	b = append(b, suffix...)
	return string(b)
}

// MatrixLayout locates one of an expert's matrices inside the expert's
// bytes: the dense data, or the packed bytes and the scales.
type MatrixLayout struct {
	MX         bool
	DType      tensor.DType // dense form
	Rows, Cols int
	Off, Size  int64 // dense data, or MXFP4 packed bytes
	ScaleOff   int64 // MXFP4 scales
	ScaleSize  int64
}

// Layout is where an expert's three matrices (w1, w2, w3) lie in its bytes.
type Layout [3]MatrixLayout

// Bind returns the three matrices as views over an expert's bytes (laid
// out as the layout says). It copies nothing.
func (lay *Layout) Bind(buf []byte, out *[3]quant.Linear) {
	for i := range lay {
		m := &lay[i]
		if m.MX {
			out[i] = quant.Linear{IsMX: true, MX: quant.Matrix{Rows: m.Rows, Cols: m.Cols,
				Packed: buf[m.Off : m.Off+m.Size : m.Off+m.Size], Scales: buf[m.ScaleOff : m.ScaleOff+m.ScaleSize : m.ScaleOff+m.ScaleSize]}}
		} else {
			out[i] = quant.Linear{Dense: tensor.Mat{DType: m.DType, Rows: m.Rows, Cols: m.Cols, Data: buf[m.Off : m.Off+m.Size : m.Off+m.Size]}}
		}
	}
}

// Loc locates one expert in the checkpoint. A contiguous expert (the
// released layout) is one run [Off, Off+Size) of shard File whose internal
// layout is the index's template; any other carries its own extents and
// layout and is read with several requests.
type Loc struct {
	File int
	Off  int64
	Size int64 // payload bytes
	irr  *irregular
}

type irregular struct {
	extents []iox.Extent
	bytes   int64
	layout  Layout
}

// Contiguous reports whether the expert is read with a single request.
func (l Loc) Contiguous() bool { return l.irr == nil }

// Shapes are the [rows, cols] of w1, w2, w3. For Kimi K3: w1 and w3 are
// [I, Lt] (gate and up, from the latent to the expert width), w2 is
// [Lt, I].
type Shapes [3][2]int

// KimiShapes returns the shapes of a Kimi K3 expert of width inter over a
// latent of width latent.
func KimiShapes(inter, latent int) Shapes {
	return Shapes{{inter, latent}, {latent, inter}, {inter, latent}}
}

// Index locates every routed expert of a checkpoint.
type Index struct {
	template Layout // offsets relative to the run start
	runBytes int64
	slot     int64
	locs     [][]Loc // by layer; nil for layers without experts
}

// Build indexes experts 0..experts-1 of each listed layer (layers is
// indexed by layer number; true means the layer has routed experts) and
// checks their tensors: every tensor present, MXFP4 U8 2-D with a packed
// and a scale tensor of the same rows and groups of 32, in one shard, or
// dense F32/BF16 of the expected shape. Every problem is reported (up to
// a limit) in one error wrapping ErrLayout: an expert that cannot be bound
// must fail the load, because a silently dropped expert still yields
// plausible tokens.
func Build(ck *iox.Checkpoint, layers []bool, experts int, shapes Shapes) (*Index, error) {
	var probs []string
	bad := func(format string, args ...any) {
		if len(probs) < 50 {
			probs = append(probs, fmt.Sprintf(format, args...))
		}
	}
	x := &Index{locs: make([][]Loc, len(layers))}
	haveTemplate := false
	for l, has := range layers {
		if !has {
			continue
		}
		x.locs[l] = make([]Loc, experts)
		for e := 0; e < experts; e++ {
			var ents []iox.Entry
			var lay Layout
			ok := true
			for w := 0; w < 3; w++ {
				rows, cols := shapes[w][0], shapes[w][1]
				m := &lay[w]
				m.Rows, m.Cols = rows, cols
				if dense, found := ck.Lookup(Name(l, e, w+1, "weight")); found {
					if (dense.DType != tensor.F32 && dense.DType != tensor.BF16) || len(dense.Shape) != 2 || dense.Shape[0] != rows || dense.Shape[1] != cols {
						bad("expert tensor %s is %s %v, want F32/BF16 [%d %d]", dense.Name, dense.Stored, dense.Shape, rows, cols)
						ok = false
						continue
					}
					m.DType, m.Size = dense.DType, dense.Size
					ents = append(ents, dense)
					continue
				}
				pn, sn := Name(l, e, w+1, "weight_packed"), Name(l, e, w+1, "weight_scale")
				packed, ok1 := ck.Lookup(pn)
				scale, ok2 := ck.Lookup(sn)
				if !ok1 {
					bad("tensor %s is missing", pn)
				}
				if !ok2 {
					bad("tensor %s is missing", sn)
				}
				if !ok1 || !ok2 {
					ok = false
					continue
				}
				if cols%quant.GroupSize != 0 {
					bad("expert %d of layer %d: width %d is not a multiple of the MXFP4 group size %d", e, l, cols, quant.GroupSize)
					ok = false
					continue
				}
				if packed.DType != tensor.U8 || scale.DType != tensor.U8 || len(packed.Shape) != 2 || len(scale.Shape) != 2 ||
					packed.Shape[0] != rows || packed.Shape[1]*2 != cols || scale.Shape[0] != rows || scale.Shape[1]*quant.GroupSize != cols {
					bad("expert %d of layer %d w%d: packed %s %v and scale %s %v do not describe MXFP4 [%d %d] with groups of %d",
						e, l, w+1, packed.Stored, packed.Shape, scale.Stored, scale.Shape, rows, cols, quant.GroupSize)
					ok = false
					continue
				}
				if packed.Shard != scale.Shard {
					bad("expert %d of layer %d w%d: packed and scale tensors are in different shards", e, l, w+1)
					ok = false
					continue
				}
				m.MX, m.Size, m.ScaleSize = true, packed.Size, scale.Size
				ents = append(ents, packed, scale)
			}
			if !ok {
				continue
			}
			loc, tmpl := locate(ents, lay)
			if loc.irr == nil {
				if !haveTemplate {
					x.template, x.runBytes, haveTemplate = tmpl, loc.Size, true
				} else if tmpl != x.template {
					loc = irregularLoc(ents, lay)
				}
			}
			x.locs[l][e] = loc
		}
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrLayout, joinProblems(probs))
	}
	for l := range x.locs {
		for _, loc := range x.locs[l] {
			need := loc.bufferBytes()
			x.slot = max(x.slot, need)
			if loc.irr != nil {
				x.runBytes = max(x.runBytes, loc.Size)
			}
		}
	}
	return x, nil
}

func joinProblems(p []string) string {
	s := p[0]
	for _, q := range p[1:] {
		s += "; " + q
	}
	return s
}

// bufferBytes is the buffer one read of the expert needs: the run's
// aligned window, sized for the worst alignment, or the extents' regions.
func (l Loc) bufferBytes() int64 {
	if l.irr != nil {
		return l.irr.bytes
	}
	return iox.AlignUp(l.Size) + iox.Align
}

// locate decides whether an expert's tensors form one contiguous run and,
// if so, returns the run and its layout relative to the run start.
func locate(ents []iox.Entry, lay Layout) (Loc, Layout) {
	lo, hi, sum := ents[0].Offset, ents[0].Offset+ents[0].Size, int64(0)
	for _, e := range ents {
		if e.Shard != ents[0].Shard {
			return irregularLoc(ents, lay), lay
		}
		lo, hi = min(lo, e.Offset), max(hi, e.Offset+e.Size)
		sum += e.Size
	}
	if hi-lo != sum {
		return irregularLoc(ents, lay), lay
	}
	k := 0
	for w := range lay {
		lay[w].Off = ents[k].Offset - lo
		k++
		if lay[w].MX {
			lay[w].ScaleOff = ents[k].Offset - lo
			k++
		}
	}
	return Loc{File: ents[0].Shard, Off: lo, Size: sum}, lay
}

// irregularLoc builds the several-request layout of an expert whose
// tensors are not one run.
func irregularLoc(ents []iox.Entry, lay Layout) Loc {
	exts, offs, total := iox.PlanExtents(ents, 0)
	k := 0
	for w := range lay {
		lay[w].Off = offs[k]
		k++
		if lay[w].MX {
			lay[w].ScaleOff = offs[k]
			k++
		}
	}
	var size int64
	for _, e := range ents {
		size += e.Size
	}
	return Loc{File: ents[0].Shard, Off: ents[0].Offset, Size: size, irr: &irregular{extents: exts, bytes: total, layout: lay}}
}

// Loc returns where expert e of layer l lives.
func (x *Index) Loc(l, e int) Loc { return x.locs[l][e] }

// Layers returns the number of layers the index spans.
func (x *Index) Layers() int { return len(x.locs) }

// Experts returns the number of experts of layer l (0 if it has none).
func (x *Index) Experts(l int) int { return len(x.locs[l]) }

// Count returns the number of experts indexed.
func (x *Index) Count() int64 {
	var n int64
	for l := range x.locs {
		n += int64(len(x.locs[l]))
	}
	return n
}

// ExpertBytes returns the payload bytes of one expert (the largest).
func (x *Index) ExpertBytes() int64 { return x.runBytes }

// SlotBytes returns the buffer bytes any expert's read needs, alignment
// slack included: the size of a cache slot.
func (x *Index) SlotBytes() int64 { return x.slot }

// Layout returns the layout of expert e of layer l inside the payload that
// Load returns.
func (x *Index) Layout(l, e int) *Layout {
	if irr := x.locs[l][e].irr; irr != nil {
		return &irr.layout
	}
	return &x.template
}

// Load reads expert e of layer l into slot (at least SlotBytes long,
// 4096-aligned for direct I/O) through read and returns the payload: the
// bytes Layout(l, e) describes, a sub-slice of slot. A contiguous expert
// is one request; another, one per extent.
func (x *Index) Load(ctx context.Context, read iox.ReadFunc, l, e int, slot []byte) ([]byte, error) {
	loc := x.locs[l][e]
	if need := loc.bufferBytes(); int64(len(slot)) < need {
		return nil, fmt.Errorf("layer %d expert %d: slot of %d bytes, the read needs %d", l, e, len(slot), need)
	}
	if loc.irr != nil {
		for _, ext := range loc.irr.extents {
			if err := read(ctx, ext, slot); err != nil {
				return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
			}
		}
		return slot[:loc.irr.bytes], nil
	}
	ext, _ := iox.SingleExtent(loc.File, loc.Off, loc.Size)
	if err := read(ctx, ext, slot); err != nil {
		return nil, fmt.Errorf("layer %d expert %d: %w", l, e, err)
	}
	return slot[ext.BufOff : ext.BufOff+loc.Size], nil
}
