package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/tensor"
)

// Plan is the checked map from the model's weights to the checkpoint's
// bytes: where every layer's matrices and every routed expert live, and the
// small vectors, already widened. Building it reads only headers and
// vectors; it validates every name, dtype and shape, so that a forward pass
// never meets a surprise.
type Plan struct {
	Cfg  *Config
	Ckpt *iox.Checkpoint

	parts   []PartLayout // by Unit(layer, part)
	vecs    []LayerVecs
	experts *expert.Index

	embed, lmHead    iox.Entry
	rank, ranks      int // a slice of the model for rank of ranks (Shard); 0, 0 whole
	finalNorm        []float32
	foldO            []float32
	outNorm, outProj []float32
}

// problems collects binding errors so that one error reports all of them.
type problems struct{ list []string }

func (p *problems) add(format string, args ...any) {
	if len(p.list) < 50 {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	} else if len(p.list) == 50 {
		p.list = append(p.list, "(more problems not shown)")
	}
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBadCheckpoint, strings.Join(p.list, "; "))
}

// NewPlan binds a checkpoint to a config.
func NewPlan(cfg *Config, ck *iox.Checkpoint) (*Plan, error) {
	p := &Plan{Cfg: cfg, Ckpt: ck}
	var pr problems
	E, V := cfg.Hidden, cfg.Vocab

	p.embed = p.matrix(&pr, modelPrefix+"embed_tokens.weight", V, E)
	p.lmHead = p.matrix(&pr, lmHeadName, V, E)
	p.finalNorm = p.vector(&pr, modelPrefix+"norm.weight", E, false)
	p.outNorm = p.vector(&pr, modelPrefix+"output_attn_res_norm.weight", E, false)
	p.outProj = p.vector(&pr, modelPrefix+"output_attn_res_proj.weight", E, false)
	p.foldO = fold(p.outNorm, p.outProj)

	p.parts = make([]PartLayout, cfg.Layers*int(NumParts))
	p.vecs = make([]LayerVecs, cfg.Layers)
	trunk := p.layerTrunkTensors()
	for l := 0; l < cfg.Layers; l++ {
		p.planLayer(&pr, l, trunk[l])
	}
	if err := pr.err(); err != nil {
		return nil, err
	}
	p.planExperts(&pr)
	if err := pr.err(); err != nil {
		return nil, err
	}
	return p, nil
}

func fold(norm, proj []float32) []float32 {
	if len(norm) != len(proj) {
		return nil
	}
	f := make([]float32, len(norm))
	for i := range f {
		f[i] = norm[i] * proj[i]
	}
	return f
}

func (p *Plan) lookup(pr *problems, name string) (iox.Entry, bool) {
	e, ok := p.Ckpt.Lookup(name)
	if !ok {
		pr.add("tensor %s is missing", name)
	}
	return e, ok
}

// matrix checks a dense F32/BF16 matrix of the given shape.
func (p *Plan) matrix(pr *problems, name string, rows, cols int) iox.Entry {
	e, ok := p.lookup(pr, name)
	if !ok {
		return e
	}
	if e.DType != tensor.F32 && e.DType != tensor.BF16 {
		pr.add("tensor %s has dtype %s, want F32 or BF16", name, e.Stored)
	}
	if len(e.Shape) != 2 || e.Shape[0] != rows || e.Shape[1] != cols {
		pr.add("tensor %s has shape %v, want [%d %d]", name, e.Shape, rows, cols)
	}
	return e
}

// vector reads and widens a small F32/BF16/F16 tensor with n elements (at
// least n if atLeast; then the first n are kept).
func (p *Plan) vector(pr *problems, name string, n int, atLeast bool) []float32 {
	e, ok := p.lookup(pr, name)
	if !ok {
		return nil
	}
	if e.DType != tensor.F32 && e.DType != tensor.BF16 && e.DType != tensor.F16 {
		pr.add("tensor %s has dtype %s, want F32, BF16 or F16", name, e.Stored)
		return nil
	}
	have := tensor.NumElements(e.Shape)
	if have != n && !(atLeast && have > n) {
		pr.add("tensor %s has %d elements (shape %v), want %d", name, have, e.Shape, n)
		return nil
	}
	t, err := p.Ckpt.Read(name)
	if err != nil {
		pr.add("%v", err)
		return nil
	}
	out := make([]float32, n)
	if err := tensor.Widen(out, t.Data[:n*e.DType.Size()], e.DType); err != nil {
		pr.add("tensor %s: %v", name, err)
		return nil
	}
	// Vectors are cheap to scan; a NaN or infinity in a norm gain, bias or
	// decay parameter would poison every token.
	for i, v := range out {
		if v-v != 0 {
			pr.add("tensor %s holds a non-finite value (%v at index %d)", name, v, i)
			return nil
		}
	}
	return out
}

// layerTrunkTensors returns, per layer, every stored tensor of the layer
// except its routed experts, in name order: one pass over the shards'
// headers (the released checkpoint has 497,220 tensors, 494,592 of them
// experts), sorting only what is kept.
func (p *Plan) layerTrunkTensors() [][]iox.Entry {
	out := make([][]iox.Entry, p.Cfg.Layers)
	prefix := modelPrefix + "layers."
	for i, sh := range p.Ckpt.Shards {
		for _, t := range sh.Header.Tensors {
			rest, ok := strings.CutPrefix(t.Name, prefix)
			if !ok || strings.Contains(rest, ".experts.") {
				continue
			}
			num, _, ok := strings.Cut(rest, ".")
			l, err := strconv.Atoi(num)
			if !ok || err != nil || l < 0 || l >= len(out) || layerPrefix(l) != prefix+num+"." {
				continue
			}
			out[l] = append(out[l], iox.Entry{Shard: i, TensorInfo: t})
		}
	}
	for _, es := range out {
		slices.SortFunc(es, func(a, b iox.Entry) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

func (p *Plan) planLayer(pr *problems, l int, all []iox.Entry) {
	c := p.Cfg
	E, P, D, Hk := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.KDAHeads
	pre := layerPrefix(l)
	v := &p.vecs[l]

	var mats [NumParts][]PartTensor
	part := PartAttn
	add := func(suffix string, rows, cols int, id MatID) {
		mats[part] = append(mats[part], PartTensor{Name: pre + suffix, Rows: rows, Cols: cols, Mat: id})
	}
	v.InNorm = p.vector(pr, pre+"input_layernorm.weight", E, false)
	v.PostNorm = p.vector(pr, pre+"post_attention_layernorm.weight", E, false)
	v.resNormA = p.vector(pr, pre+"self_attention_res_norm.weight", E, false)
	v.resProjA = p.vector(pr, pre+"self_attention_res_proj.weight", E, false)
	v.resNormM = p.vector(pr, pre+"mlp_res_norm.weight", E, false)
	v.resProjM = p.vector(pr, pre+"mlp_res_proj.weight", E, false)
	v.FoldA = fold(v.resNormA, v.resProjA)
	v.FoldM = fold(v.resNormM, v.resProjM)

	if c.IsMLA(l) {
		H, dh, Cq, Ckv, r, vh := c.MLAHeads, c.MLAHeadDim(), c.QLoraRank, c.KVLoraRank, c.QKRopeDim, c.VHeadDim
		add("self_attn.q_a_proj.weight", Cq, E, MatQAProj)
		add("self_attn.q_b_proj.weight", H*dh, Cq, MatQBProj)
		add("self_attn.kv_a_proj_with_mqa.weight", Ckv+r, E, MatKVAProj)
		add("self_attn.kv_b_proj.weight", H*(c.QKNopeDim+vh), Ckv, MatKVBProj)
		add("self_attn.o_proj.weight", E, H*vh, MatMLAOProj)
		if c.MLAOutputGate {
			add("self_attn.g_proj.weight", H*vh, E, MatMLAGProj)
		}
		v.QANorm = p.vector(pr, pre+"self_attn.q_a_layernorm.weight", Cq, false)
		v.KVANorm = p.vector(pr, pre+"self_attn.kv_a_layernorm.weight", Ckv, false)
	} else {
		add("self_attn.q_proj.weight", P, E, MatQProj)
		add("self_attn.k_proj.weight", P, E, MatKProj)
		add("self_attn.v_proj.weight", P, E, MatVProj)
		add("self_attn.g_proj.weight", P, E, MatGProj)
		add("self_attn.o_proj.weight", E, P, MatOProj)
		add("self_attn.f_a_proj.weight", D, E, MatFAProj)
		add("self_attn.f_b_proj.weight", P, D, MatFBProj)
		add("self_attn.b_proj.weight", Hk, E, MatBProj)
		kc := c.ConvKernel
		v.QConv = p.vector(pr, pre+"self_attn.q_conv1d.weight", P*kc, false)
		v.KConv = p.vector(pr, pre+"self_attn.k_conv1d.weight", P*kc, false)
		v.VConv = p.vector(pr, pre+"self_attn.v_conv1d.weight", P*kc, false)
		v.ALog = p.vector(pr, pre+"self_attn.A_log", Hk, true)
		v.DTBias = p.vector(pr, pre+"self_attn.dt_bias", P, false)
		v.ONorm = p.vector(pr, pre+"self_attn.o_norm.weight", D, false)
	}
	part = PartFFN
	if c.IsDense(l) {
		Id := c.DenseIntermediate
		add("mlp.gate_proj.weight", Id, E, MatGateProj)
		add("mlp.up_proj.weight", Id, E, MatUpProj)
		add("mlp.down_proj.weight", E, Id, MatDownProj)
	} else {
		moe := "block_sparse_moe."
		add(moe+"gate.weight", c.Experts, E, MatRouter)
		add(moe+"routed_expert_down_proj.weight", c.LatentDim, E, MatLatentDown)
		add(moe+"routed_expert_up_proj.weight", E, c.LatentDim, MatLatentUp)
		if c.SharedExperts > 0 {
			S := c.SharedExperts * c.MoEIntermediate
			add(moe+"shared_experts.gate_proj.weight", S, E, MatSharedGate)
			add(moe+"shared_experts.up_proj.weight", S, E, MatSharedUp)
			add(moe+"shared_experts.down_proj.weight", E, S, MatSharedDown)
		}
		v.Bias = p.vector(pr, pre+moe+"gate.e_score_correction_bias", c.Experts, false)
		v.LatentNorm = p.vector(pr, pre+moe+"routed_expert_norm.weight", c.LatentDim, false)
	}

	// Every stored tensor of the layer except the routed experts belongs to
	// one of its two parts: the matrices are bound from the part's buffer,
	// the vectors (already widened) are read along because they sit between
	// the matrices. Tensors that are not the FFN's go with the attention.
	for pt := PartAttn; pt < NumParts; pt++ {
		pp := &p.parts[Unit(l, pt)]
		pp.Layer, pp.Part = l, pt
		var locs []iox.Entry
		ms := mats[pt]
		matIndex := make([]int, len(ms))
		for i := range ms {
			e := p.matrix(pr, ms[i].Name, ms[i].Rows, ms[i].Cols)
			ms[i].DType = e.DType
			matIndex[i] = len(locs)
			locs = append(locs, e)
		}
		if len(pr.list) > 0 {
			return
		}
		for _, e := range all {
			if !isMatName(ms, e.Name) && !isMatName(mats[1-pt], e.Name) && ffnTensor(e.Name, pre) == (pt == PartFFN) {
				locs = append(locs, e)
			}
		}
		exts, offs, total := planExtents(locs, 64<<10)
		for i := range ms {
			ms[i].Off = offs[matIndex[i]]
			pp.Payload += int64(ms[i].Rows * ms[i].Cols * ms[i].DType.Size())
		}
		pp.Tensors, pp.Extents, pp.Bytes = ms, exts, total
	}
}

// ffnTensor reports whether a layer tensor belongs to the FFN part.
func ffnTensor(name, prefix string) bool {
	rest := strings.TrimPrefix(name, prefix)
	return strings.HasPrefix(rest, "mlp.") || strings.HasPrefix(rest, "block_sparse_moe.")
}

func isMatName(mats []PartTensor, name string) bool {
	for _, m := range mats {
		if m.Name == name {
			return true
		}
	}
	return false
}

// planExperts locates every routed expert and checks its six (or three)
// tensors. An expert that cannot be bound fails the load: a silently dropped
// expert would still give plausible tokens.
func (p *Plan) planExperts(pr *problems) {
	c := p.Cfg
	layers := make([]bool, c.Layers)
	for l := c.FirstKDense; l < c.Layers; l++ {
		layers[l] = true
	}
	x, err := expert.Build(p.Ckpt, layers, c.Experts, expert.KimiShapes(c.MoEIntermediate, c.LatentDim))
	if err != nil {
		pr.add("%v", err)
		return
	}
	p.experts = x
}
