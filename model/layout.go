package model

import (
	"errors"
	"fmt"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/tensor"
)

// ErrBadCheckpoint reports tensors that are missing, of the wrong dtype or
// shape, or laid out in a way k3 cannot read.
var ErrBadCheckpoint = errors.New("bad checkpoint")

// Tensor name prefixes of the released checkpoint.
const (
	modelPrefix = "language_model.model."
	lmHeadName  = "language_model.lm_head.weight"
)

func layerPrefix(l int) string { return fmt.Sprintf("%slayers.%d.", modelPrefix, l) }

// Align is the alignment of direct-I/O reads: every read window starts and
// ends on a multiple of it, and every buffer region starts on one.
const Align = iox.Align

// Extent and ReadFunc are the I/O layer's: a byte range of a file and
// where it lands in a buffer, and a function that reads one.
type (
	Extent   = iox.Extent
	ReadFunc = iox.ReadFunc
)

// planExtents lays out tensor locations in one buffer; see iox.PlanExtents.
func planExtents(locs []iox.Entry, maxGap int64) ([]Extent, []int64, int64) {
	return iox.PlanExtents(locs, maxGap)
}

// matSpec says where one matrix of a layer lives inside the layer's buffer.
type matSpec struct {
	name       string
	rows, cols int
	dtype      tensor.DType
	off        int64
	field      func(*LayerMats) *Linear
}

// Part names half of a layer's dense weights. The trunk streams layers in
// two parts, so that its ring buffers hold half a layer: on Kimi K3 the
// largest part (layer 0's dense FFN, 1.45 GB) is much smaller than the
// largest layer (2.34 GB).
type Part int

// The two parts of a layer, in the order the forward pass uses them.
const (
	PartAttn Part = iota // attention weights (KDA or MLA) and the layer's norms
	PartFFN              // dense FFN or the MoE trunk (router, latent projections, shared experts)
	NumParts
)

func (p Part) String() string {
	if p == PartAttn {
		return "attention"
	}
	return "ffn"
}

// partPlan is everything needed to read and bind one part of a layer's
// dense (non-expert) weights.
type partPlan struct {
	layer   int
	part    Part
	extents []Extent
	bytes   int64 // buffer size, alignment included
	payload int64 // bytes of matrix data
	mats    []matSpec
	comp    *compPart // set when the part is read from a compressed pack
}

// room is the buffer the part is loaded into: its bytes, or for a
// compressed part the room to decode in place (compRoom).
func (pp *partPlan) room() int64 {
	if pp.comp != nil && len(pp.extents) == 1 {
		n, _ := compRoom(pp.bytes, pp.comp, pp.extents[0])
		return n
	}
	return pp.bytes
}

// unit returns the streaming unit index of (layer, part).
func unit(layer int, part Part) int { return layer*int(NumParts) + int(part) }

// LayerMats are the matrix views of one layer, bound to the buffer that
// holds the layer's bytes. Fields unused by the layer's type stay zero.
type LayerMats struct {
	// KDA
	QProj, KProj, VProj, GProj, OProj, FAProj, FBProj, BProj Linear
	// MLA
	QAProj, QBProj, KVAProj, KVBProj, MLAOProj, MLAGProj Linear
	// dense FFN
	GateProj, UpProj, DownProj Linear
	// MoE trunk
	Router, LatentDown, LatentUp, SharedGate, SharedUp, SharedDown Linear
}

// LayerVecs are the small per-layer vectors, widened to f32 and resident.
type LayerVecs struct {
	InNorm, PostNorm                       []float32
	FoldA, FoldM                           []float32 // norm ⊙ proj of the two AttnRes aggregators
	resNormA, resProjA, resNormM, resProjM []float32

	// KDA
	QConv, KConv, VConv []float32 // [P][Kc]
	ALog, DTBias, ONorm []float32
	// MLA
	QANorm, KVANorm []float32
	// MoE
	Bias, LatentNorm []float32
}

func bind(buf []byte, specs []matSpec, m *LayerMats) {
	for _, s := range specs {
		size := int64(s.rows * s.cols * s.dtype.Size())
		*s.field(m) = Linear{Dense: tensor.Mat{DType: s.dtype, Rows: s.rows, Cols: s.cols, Data: buf[s.off : s.off+size : s.off+size]}}
	}
}
