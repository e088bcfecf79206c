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

// PartTensor is one matrix inside a layer part's image: its checkpoint
// name, its shape and dtype, and its offset in the image.
type PartTensor struct {
	Name       string
	Rows, Cols int
	DType      tensor.DType
	Off        int64
	Mat        MatID // the LayerMats field it binds
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

// PartLayout is the image of one part of a layer's dense (non-expert)
// weights: the buffer its matrices are bound from, and the checkpoint byte
// ranges that fill it. Where the image's bytes are read from (the shards,
// a packed trunk) and when is the trunk's business (internal/engine/trunk);
// the layout only says what the image is.
type PartLayout struct {
	Layer int
	Part  Part
	// Extents are the checkpoint's byte ranges that make up the image, and
	// where each lands in it (iox.PlanExtents: neighbouring tensors share
	// a read).
	Extents []Extent
	// Bytes is the image's size, alignment included; Payload the bytes of
	// its matrices.
	Bytes, Payload int64
	// Tensors are the matrices bound from the image, in binding order.
	Tensors []PartTensor
}

// Unit returns the index of (layer, part) among a model's parts, in the
// order a forward pass uses them: (0, attention), (0, ffn), (1, attention),
// ...
func Unit(layer int, part Part) int { return layer*int(NumParts) + int(part) }

// MatID names one matrix of a layer (a field of LayerMats): the ranks of a
// cluster name the products of a round by it.
type MatID uint8

// The matrices of a layer, in LayerMats' field order.
const (
	MatQProj MatID = iota
	MatKProj
	MatVProj
	MatGProj
	MatOProj
	MatFAProj
	MatFBProj
	MatBProj
	MatQAProj
	MatQBProj
	MatKVAProj
	MatKVBProj
	MatMLAOProj
	MatMLAGProj
	MatGateProj
	MatUpProj
	MatDownProj
	MatRouter
	MatLatentDown
	MatLatentUp
	MatSharedGate
	MatSharedUp
	MatSharedDown
	NumMats
)

// Field returns the matrix id names, nil for an id out of range.
func (m *LayerMats) Field(id MatID) *Linear {
	fields := [NumMats]*Linear{&m.QProj, &m.KProj, &m.VProj, &m.GProj, &m.OProj, &m.FAProj, &m.FBProj, &m.BProj,
		&m.QAProj, &m.QBProj, &m.KVAProj, &m.KVBProj, &m.MLAOProj, &m.MLAGProj,
		&m.GateProj, &m.UpProj, &m.DownProj,
		&m.Router, &m.LatentDown, &m.LatentUp, &m.SharedGate, &m.SharedUp, &m.SharedDown}
	if id >= NumMats {
		return nil
	}
	return fields[id]
}

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

// Bind points m's matrices for the part at buf, the part's image (at least
// Bytes long); the matrices alias buf.
func (pl *PartLayout) Bind(buf []byte, m *LayerMats) {
	for _, s := range pl.Tensors {
		size := int64(s.Rows * s.Cols * s.DType.Size())
		*m.Field(s.Mat) = Linear{Dense: tensor.Mat{DType: s.DType, Rows: s.Rows, Cols: s.Cols, Data: buf[s.Off : s.Off+size : s.Off+size]}}
	}
}
