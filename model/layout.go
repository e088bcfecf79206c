package model

import (
	"errors"
	"fmt"
	"sort"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/quant"
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
const Align = 4096

// Extent is one contiguous byte range of a stored file that is read with a
// single request. In a buffer, the range's bytes start at BufOff; the read
// window [Off &^ (Align-1), roundup(Off+Size, Align)) lands at Region, so
// BufOff = Region + Off%Align.
type Extent struct {
	File   int // shard index
	Off    int64
	Size   int64
	Region int64
	BufOff int64
}

// Window returns the aligned file range that covers the extent.
func (e Extent) Window() (off, size int64) {
	start := e.Off &^ (Align - 1)
	end := (e.Off + e.Size + Align - 1) &^ (Align - 1)
	return start, end - start
}

// planExtents groups tensor locations into extents (merging neighbours that
// are adjacent, or separated by at most maxGap bytes, in the same file) and
// assigns each an aligned buffer region. It returns the buffer offset of
// every input location and the total buffer size.
func planExtents(locs []iox.Entry, maxGap int64) (exts []Extent, bufOff []int64, total int64) {
	order := make([]int, len(locs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := locs[order[a]], locs[order[b]]
		if x.Shard != y.Shard {
			return x.Shard < y.Shard
		}
		return x.Offset < y.Offset
	})
	bufOff = make([]int64, len(locs))
	owner := make([]int, len(locs))
	for _, i := range order {
		l := locs[i]
		if n := len(exts); n > 0 {
			last := &exts[n-1]
			if last.File == l.Shard && l.Offset >= last.Off && l.Offset <= last.Off+last.Size+maxGap {
				if end := l.Offset + l.Size; end > last.Off+last.Size {
					last.Size = end - last.Off
				}
				owner[i] = n - 1
				continue
			}
		}
		exts = append(exts, Extent{File: l.Shard, Off: l.Offset, Size: l.Size})
		owner[i] = len(exts) - 1
	}
	for k := range exts {
		_, wsize := exts[k].Window()
		exts[k].Region = total
		exts[k].BufOff = total + exts[k].Off%Align
		total += wsize
	}
	for i, l := range locs {
		e := exts[owner[i]]
		bufOff[i] = e.BufOff + (l.Offset - e.Off)
	}
	return exts, bufOff, total
}

// matSpec says where one matrix of a layer lives inside the layer's buffer.
type matSpec struct {
	name       string
	rows, cols int
	dtype      tensor.DType
	off        int64
	field      func(*LayerMats) *Linear
}

// vecSpec describes a small vector that is widened to f32 at load time.
type vecSpec struct {
	name    string
	n       int  // elements used
	atLeast bool // the stored tensor may be longer (A_log)
	field   func(*LayerVecs) *[]float32
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
}

// unit returns the streaming unit index of (layer, part).
func unit(layer int, part Part) int { return layer*int(NumParts) + int(part) }

// expertMat locates one of an expert's three matrices (w1, w2, w3) inside
// the expert's bytes.
type expertMat struct {
	isMX       bool
	dtype      tensor.DType // dense form
	rows, cols int
	off        int64 // packed bytes, or the dense matrix
	scaleOff   int64 // MXFP4 scales
	size       int64
	scaleSize  int64
}

// ExpertLoc locates one routed expert in the checkpoint. A regular expert
// (the released layout) is one contiguous run whose internal layout is the
// model-wide template; an irregular one carries its own extents and
// matrices.
type ExpertLoc struct {
	File int
	Off  int64
	Size int64
	irr  *irregularExpert
}

type irregularExpert struct {
	extents []Extent
	bytes   int64
	mats    [3]expertMat
}

// Contiguous reports whether the expert is read with a single request.
func (e ExpertLoc) Contiguous() bool { return e.irr == nil }

// expertPlan indexes every routed expert of every MoE layer.
type expertPlan struct {
	template [3]expertMat // offsets relative to the run start
	runBytes int64        // payload bytes of one regular expert
	slot     int64        // buffer bytes any expert needs (aligned window or extents)
	locs     [][]ExpertLoc
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

func bind(buf []byte, specs []matSpec, m *LayerMats) {
	for _, s := range specs {
		size := int64(s.rows * s.cols * s.dtype.Size())
		*s.field(m) = Linear{Dense: tensor.Mat{DType: s.dtype, Rows: s.rows, Cols: s.cols, Data: buf[s.off : s.off+size : s.off+size]}}
	}
}

// bindExpert builds the three matrices of an expert from its bytes.
func bindExpert(buf []byte, mats *[3]expertMat, out *[3]Linear) {
	for i := range mats {
		m := &mats[i]
		if m.isMX {
			out[i] = Linear{IsMX: true, MX: quant.Matrix{Rows: m.rows, Cols: m.cols,
				Packed: buf[m.off : m.off+m.size : m.off+m.size], Scales: buf[m.scaleOff : m.scaleOff+m.scaleSize : m.scaleOff+m.scaleSize]}}
		} else {
			out[i] = Linear{Dense: tensor.Mat{DType: m.dtype, Rows: m.rows, Cols: m.cols, Data: buf[m.off : m.off+m.size : m.off+m.size]}}
		}
	}
}
