package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tensor"
)

// DefaultShardSize is the target shard size when WriteOptions.ShardSize is
// zero.
const DefaultShardSize = 4 << 30

// headerAlign is the alignment of every shard's data section: the JSON
// header is padded with spaces (as safetensors allows) so that the first
// tensor starts on a page.
const headerAlign = 4096

// Names of the files besides the shards.
const (
	ConfigFile = "config.json"
	IndexFile  = "model.safetensors.index.json"
)

// Tensor is one planned tensor.
type Tensor struct {
	Name   string
	DType  tensor.DType
	Shape  []int
	Offset int64 // absolute offset in its shard file
	Size   int64
	gen    generator
}

// Shard is one planned safetensors file.
type Shard struct {
	Name    string
	Tensors []Tensor // in file order
	DataOff int64    // 8 + padded header length
	Size    int64    // file size
	header  []byte   // the first DataOff bytes of the file
}

// Layout is the complete plan of a synthetic checkpoint: every tensor's
// shard and offset, and the bytes of every small file. It is computed
// without writing anything.
type Layout struct {
	Profile Profile
	Config  *model.Config
	Shards  []Shard
	// Tensors counts the tensors; TensorBytes their data.
	Tensors     int
	TensorBytes int64
	// ExpertBytes is the size of one routed expert's contiguous run (the
	// six MXFP4 tensors); 17,547,264 at the real widths.
	ExpertBytes int64
	// FileBytes is the size of every file written: shards, index and
	// config.json (tokenizer files not included).
	FileBytes int64

	configJSON, indexJSON []byte
}

// unit is a run of tensors that must not span two shards: the embedding, a
// layer's trunk, one expert, the model head.
type unit struct {
	tensors []Tensor
	size    int64
	group   int // the release layout's shard (zero-based): the layer, then head, projector, tower
}

// Widths of the random distributions. Matrices are N(0, 1/fan_in) so that a
// normalised input (RMS 1) gives outputs of RMS about 1; the router's
// logits have a standard deviation of about 1 and the selection bias is of
// the order of the score spread, so that the bias matters while routing
// still varies from token to token.
const (
	gainSpread = 0.1 // norm gains uniform in [1-g, 1+g)
	aLogSpread = 0.5 // A_log uniform in [-a, a)
	biasSpread = 0.1 // e_score_correction_bias uniform in [-b, b)
	embedStd   = 1.0
)

// PlanLayout plans the checkpoint of profile p with shards of about
// shardSize bytes (if zero or negative: the profile's ShardSize, else
// DefaultShardSize). No layer's trunk
// and no expert spans two shards; a unit larger than shardSize gets a shard
// of its own.
func PlanLayout(p Profile, shardSize int64) (*Layout, error) {
	c, err := p.config()
	if err != nil {
		return nil, err
	}
	if p.Release && shardSize > 0 {
		return nil, fmt.Errorf("synth: profile %s has the release's layout, one layer per shard: a shard size does not apply", p.Name)
	}
	if shardSize <= 0 {
		shardSize = p.ShardSize
	}
	if shardSize <= 0 {
		shardSize = DefaultShardSize
	}
	L := &Layout{Profile: p, Config: c}
	units := buildUnits(c, p.Seed, p.Release, &L.ExpertBytes)
	if p.Release {
		b := &builder{seed: p.Seed}
		proj, tower := visionUnits(b, p.Vision, c.Hidden)
		proj.group, tower.group = c.Layers+1, c.Layers+2
		units = append(units, proj, tower)
	}

	var groups [][]unit
	if p.Release {
		groups = make([][]unit, c.Layers+3)
		for _, u := range units {
			groups[u.group] = append(groups[u.group], u)
		}
	} else { // greedy packing
		var cur int64
		for _, u := range units {
			if len(groups) == 0 || (cur > 0 && cur+u.size > shardSize) {
				groups = append(groups, nil)
				cur = 0
			}
			groups[len(groups)-1] = append(groups[len(groups)-1], u)
			cur += u.size
		}
	}
	n := len(groups)
	weightMap := make(map[string]string)
	for i, g := range groups {
		sh := Shard{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)}
		if p.Release {
			sh.Name = releaseShardName(i+1, n)
		}
		for _, u := range g {
			sh.Tensors = append(sh.Tensors, u.tensors...)
		}
		if p.Release {
			canonical(sh.Tensors)
		}
		var off int64
		for k := range sh.Tensors {
			t := &sh.Tensors[k]
			t.Offset = off // relative for now
			off += t.Size
			weightMap[t.Name] = sh.Name
		}
		sh.header = encodeHeader(sh.Tensors, p.Release)
		sh.DataOff = int64(len(sh.header))
		for k := range sh.Tensors {
			sh.Tensors[k].Offset += sh.DataOff
		}
		sh.Size = sh.DataOff + off
		L.Tensors += len(sh.Tensors)
		L.TensorBytes += off
		L.FileBytes += sh.Size
		L.Shards = append(L.Shards, sh)
	}
	L.indexJSON, err = json.MarshalIndent(struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": L.TensorBytes}, weightMap}, "", " ")
	if err != nil {
		return nil, err
	}
	L.indexJSON = append(L.indexJSON, '\n')
	L.configJSON, err = configJSON(p, c)
	if err != nil {
		return nil, err
	}
	L.FileBytes += int64(len(L.indexJSON) + len(L.configJSON))
	return L, nil
}

// encodeHeader returns the 8-byte length, the JSON header and the padding
// that aligns the data section: to a page, or as the release's files are
// (release), without __metadata__ and to 8 bytes. Offsets of ts are
// relative to the data.
func encodeHeader(ts []Tensor, release bool) []byte {
	b := make([]byte, 8, 64+len(ts)*160)
	align := headerAlign
	if release {
		b = append(b, '{')
		align = 8
	} else {
		b = append(b, `{"__metadata__":{"format":"pt"}`...)
	}
	for i, t := range ts {
		name, _ := json.Marshal(t.Name)
		if i > 0 || !release {
			b = append(b, ',')
		}
		b = append(b, name...)
		b = append(b, `:{"dtype":"`...)
		b = append(b, t.DType.String()...)
		b = append(b, `","shape":[`...)
		for i, d := range t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, t.Offset, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.Offset+t.Size, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%align != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b, uint64(len(b)-8))
	return b
}

// builder creates tensors with their generators.
type builder struct {
	seed uint64
	ts   []Tensor
}

func (b *builder) add(name string, dt tensor.DType, shape []int, g generator) {
	n := int64(dt.Size())
	for _, d := range shape {
		n *= int64(d)
	}
	b.ts = append(b.ts, Tensor{Name: name, DType: dt, Shape: shape, Size: n, gen: g})
}

func (b *builder) key(name string) uint64 { return tensorKey(b.seed, name) }

// mat is a BF16 matrix [rows, cols] drawn from N(0, std²).
func (b *builder) mat(name string, rows, cols int, std float64) {
	b.add(name, tensor.BF16, []int{rows, cols}, normalBF16{key: b.key(name), tab: normalTable(std)})
}

// linear is a BF16 projection [out, in] with variance 1/in.
func (b *builder) linear(name string, out, in int) { b.mat(name, out, in, 1/math.Sqrt(float64(in))) }

// vec is an F32 or BF16 vector of the given shape.
func (b *builder) vec(name string, dt tensor.DType, shape []int, kind vecKind, lo, hi float64, used int) {
	b.add(name, dt, shape, vector{key: b.key(name), dtype: dt, kind: kind, lo: lo, hi: hi, n: uint64(used)})
}

// gain is a BF16 norm gain of n elements, uniform around 1.
func (b *builder) gain(name string, n int) {
	b.vec(name, tensor.BF16, []int{n}, vecUniform, 1-gainSpread, 1+gainSpread, n)
}

// mxfp4 is one MXFP4 matrix [rows, cols]: packed then scale, with
// dequantised variance 1/cols.
func (b *builder) mxfp4(prefix string, rows, cols int) {
	b.add(prefix+".weight_packed", tensor.U8, []int{rows, cols / 2}, randomBytes{key: b.key(prefix + ".weight_packed")})
	b.add(prefix+".weight_scale", tensor.U8, []int{rows, cols / 32}, newScaleBytes(b.key(prefix+".weight_scale"), 1/float64(cols)))
}

// takeGroup is take for the release layout's shard group.
func (b *builder) takeGroup(group int) unit {
	u := b.take()
	u.group = group
	return u
}

func (b *builder) take() unit {
	u := unit{tensors: b.ts}
	for _, t := range b.ts {
		u.size += t.Size
	}
	b.ts = nil
	return u
}

const (
	modelPrefix = "language_model.model."
	lmHeadName  = "language_model.lm_head.weight"
)

// buildUnits lists every tensor in file order, grouped into units: the
// embedding; per layer its trunk (norms, attention, FFN or MoE trunk) then
// each routed expert (w1, w2, w3; packed before scale); the model head.
// The dtypes are those of the release: BF16 matrices, norms, residual
// projections and router bias; F32 conv kernels, A_log and dt_bias.
//
// With release, the vectors the release stores as F32 (the KDA output norm
// and the router's selection bias) are F32 too, and every unit carries its
// release shard (unit.group).
func buildUnits(c *model.Config, seed uint64, release bool, expertBytes *int64) []unit {
	b := &builder{seed: seed}
	E, V := c.Hidden, c.Vocab
	var units []unit

	b.mat(modelPrefix+"embed_tokens.weight", V, E, embedStd)
	units = append(units, b.takeGroup(c.Layers))

	for l := 0; l < c.Layers; l++ {
		pre := fmt.Sprintf("%slayers.%d.", modelPrefix, l)
		b.gain(pre+"input_layernorm.weight", E)
		if c.IsMLA(l) {
			H, dh, Cq, Ckv, r, vh := c.MLAHeads, c.MLAHeadDim(), c.QLoraRank, c.KVLoraRank, c.QKRopeDim, c.VHeadDim
			a := pre + "self_attn."
			b.linear(a+"q_a_proj.weight", Cq, E)
			b.gain(a+"q_a_layernorm.weight", Cq)
			b.linear(a+"q_b_proj.weight", H*dh, Cq)
			b.linear(a+"kv_a_proj_with_mqa.weight", Ckv+r, E)
			b.gain(a+"kv_a_layernorm.weight", Ckv)
			b.linear(a+"kv_b_proj.weight", H*(c.QKNopeDim+vh), Ckv)
			b.linear(a+"o_proj.weight", E, H*vh)
			if c.MLAOutputGate {
				b.linear(a+"g_proj.weight", H*vh, E)
			}
		} else {
			P, D, Hk, Kc := c.KDAWidth(), c.KDAHeadDim, c.KDAHeads, c.ConvKernel
			a := pre + "self_attn."
			b.linear(a+"q_proj.weight", P, E)
			b.linear(a+"k_proj.weight", P, E)
			b.linear(a+"v_proj.weight", P, E)
			b.linear(a+"g_proj.weight", P, E)
			b.linear(a+"o_proj.weight", E, P)
			b.linear(a+"f_a_proj.weight", D, E)
			b.linear(a+"f_b_proj.weight", P, D)
			b.linear(a+"b_proj.weight", Hk, E)
			cb := math.Sqrt(3 / float64(Kc)) // variance 1/Kc
			for _, n := range []string{"q_conv1d", "k_conv1d", "v_conv1d"} {
				b.vec(a+n+".weight", tensor.F32, []int{P, 1, Kc}, vecUniform, -cb, cb, P*Kc)
			}
			// A_log is stored padded with zeros to the head dimension,
			// as in the release (128 values, 96 used).
			b.vec(a+"A_log", tensor.F32, []int{max(Hk, D)}, vecUniform, -aLogSpread, aLogSpread, Hk)
			b.vec(a+"dt_bias", tensor.F32, []int{P}, vecConst, 0, 0, P)
			if release {
				b.vec(a+"o_norm.weight", tensor.F32, []int{D}, vecUniform, 1-gainSpread, 1+gainSpread, D)
			} else {
				b.gain(a+"o_norm.weight", D)
			}
		}
		b.gain(pre+"post_attention_layernorm.weight", E)
		invE := 1 / math.Sqrt(float64(E))
		b.gain(pre+"self_attention_res_norm.weight", E)
		b.mat(pre+"self_attention_res_proj.weight", 1, E, invE)
		b.gain(pre+"mlp_res_norm.weight", E)
		b.mat(pre+"mlp_res_proj.weight", 1, E, invE)
		if c.IsDense(l) {
			Id := c.DenseIntermediate
			b.linear(pre+"mlp.gate_proj.weight", Id, E)
			b.linear(pre+"mlp.up_proj.weight", Id, E)
			b.linear(pre+"mlp.down_proj.weight", E, Id)
			units = append(units, b.takeGroup(l))
			continue
		}
		m := pre + "block_sparse_moe."
		b.linear(m+"gate.weight", c.Experts, E)
		biasType := tensor.BF16
		if release {
			biasType = tensor.F32
		}
		b.vec(m+"gate.e_score_correction_bias", biasType, []int{c.Experts}, vecUniform, -biasSpread, biasSpread, c.Experts)
		b.linear(m+"routed_expert_down_proj.weight", c.LatentDim, E)
		b.linear(m+"routed_expert_up_proj.weight", E, c.LatentDim)
		b.gain(m+"routed_expert_norm.weight", c.LatentDim)
		if c.SharedExperts > 0 {
			S := c.SharedExperts * c.MoEIntermediate
			b.linear(m+"shared_experts.gate_proj.weight", S, E)
			b.linear(m+"shared_experts.up_proj.weight", S, E)
			b.linear(m+"shared_experts.down_proj.weight", E, S)
		}
		units = append(units, b.takeGroup(l))
		I, Lt := c.MoEIntermediate, c.LatentDim
		for e := 0; e < c.Experts; e++ {
			x := fmt.Sprintf("%sexperts.%d.", m, e)
			b.mxfp4(x+"w1", I, Lt)
			b.mxfp4(x+"w2", Lt, I)
			b.mxfp4(x+"w3", I, Lt)
			u := b.takeGroup(l)
			*expertBytes = u.size
			units = append(units, u)
		}
	}

	b.gain(modelPrefix+"norm.weight", E)
	b.gain(modelPrefix+"output_attn_res_norm.weight", E)
	b.mat(modelPrefix+"output_attn_res_proj.weight", 1, E, 1/math.Sqrt(float64(E)))
	b.linear(lmHeadName, V, E)
	units = append(units, b.takeGroup(c.Layers))
	return units
}

// configJSON writes the nested config.json of the release: the language
// model under text_config, the KDA keys under linear_attn_config.
func configJSON(p Profile, c *model.Config) ([]byte, error) {
	var kda []int
	for l := 0; l < c.Layers; l++ {
		if !c.IsMLA(l) {
			kda = append(kda, l+1)
		}
	}
	type linear struct {
		NumHeads        int     `json:"num_heads"`
		HeadDim         int     `json:"head_dim"`
		ShortConvKernel int     `json:"short_conv_kernel_size"`
		GateLowerBound  float32 `json:"gate_lower_bound"`
		FullAttnLayers  []int   `json:"full_attn_layers"`
		KDALayers       []int   `json:"kda_layers"`
		UseFullRankGate bool    `json:"use_full_rank_gate"`
	}
	type quantGroup struct {
		Targets []string `json:"targets"`
		Weights struct {
			NumBits   int    `json:"num_bits"`
			Type      string `json:"type"`
			GroupSize int    `json:"group_size"`
			Strategy  string `json:"strategy"`
		} `json:"weights"`
	}
	type quantization struct {
		QuantMethod  string                `json:"quant_method"`
		Format       string                `json:"format"`
		ConfigGroups map[string]quantGroup `json:"config_groups"`
	}
	type text struct {
		ModelType             string       `json:"model_type"`
		HiddenSize            int          `json:"hidden_size"`
		NumHiddenLayers       int          `json:"num_hidden_layers"`
		VocabSize             int          `json:"vocab_size"`
		RMSNormEps            float32      `json:"rms_norm_eps"`
		NumAttentionHeads     int          `json:"num_attention_heads"`
		NumKeyValueHeads      int          `json:"num_key_value_heads"`
		QLoraRank             int          `json:"q_lora_rank"`
		KVLoraRank            int          `json:"kv_lora_rank"`
		QKNopeHeadDim         int          `json:"qk_nope_head_dim"`
		QKRopeHeadDim         int          `json:"qk_rope_head_dim"`
		VHeadDim              int          `json:"v_head_dim"`
		MLAUseOutputGate      bool         `json:"mla_use_output_gate"`
		MLAUseNope            bool         `json:"mla_use_nope"`
		NumExperts            int          `json:"num_experts"`
		NumExpertsPerToken    int          `json:"num_experts_per_token"`
		NumSharedExperts      int          `json:"num_shared_experts"`
		RoutedExpertHidden    int          `json:"routed_expert_hidden_size"`
		MoEIntermediateSize   int          `json:"moe_intermediate_size"`
		RoutedScalingFactor   float32      `json:"routed_scaling_factor"`
		MoERenormalize        bool         `json:"moe_renormalize"`
		LatentMoEUseNorm      bool         `json:"latent_moe_use_norm"`
		MoERouterActivation   string       `json:"moe_router_activation_func"`
		FirstKDenseReplace    int          `json:"first_k_dense_replace"`
		IntermediateSize      int          `json:"intermediate_size"`
		AttnResBlockSize      int          `json:"attn_res_block_size"`
		HiddenAct             string       `json:"hidden_act"`
		SituBeta              float32      `json:"activation_situ_beta"`
		SituLinearBeta        float32      `json:"activation_situ_linear_beta"`
		TieWordEmbeddings     bool         `json:"tie_word_embeddings"`
		NumNextNPredictLayers int          `json:"num_nextn_predict_layers"`
		LinearAttnConfig      linear       `json:"linear_attn_config"`
		QuantizationConfig    quantization `json:"quantization_config"`
	}
	type synthInfo struct {
		Generator string `json:"generator"`
		Profile   string `json:"profile"`
		Seed      uint64 `json:"seed"`
		Version   int    `json:"version"`
	}
	type root struct {
		Architectures []string  `json:"architectures"`
		ModelType     string    `json:"model_type"`
		TextConfig    text      `json:"text_config"`
		Synthetic     synthInfo `json:"k3_synthetic"`
	}
	var qg quantGroup
	qg.Targets = []string{"Linear"}
	qg.Weights.NumBits, qg.Weights.Type, qg.Weights.GroupSize, qg.Weights.Strategy = 4, "float", 32, "group"
	r := root{
		Architectures: []string{"KimiK3ForConditionalGeneration"},
		ModelType:     "kimi_k3",
		TextConfig: text{
			ModelType: "kimi_k3", HiddenSize: c.Hidden, NumHiddenLayers: c.Layers, VocabSize: c.Vocab, RMSNormEps: c.RMSNormEps,
			NumAttentionHeads: c.MLAHeads, NumKeyValueHeads: c.MLAHeads, QLoraRank: c.QLoraRank, KVLoraRank: c.KVLoraRank,
			QKNopeHeadDim: c.QKNopeDim, QKRopeHeadDim: c.QKRopeDim, VHeadDim: c.VHeadDim,
			MLAUseOutputGate: c.MLAOutputGate, MLAUseNope: true,
			NumExperts: c.Experts, NumExpertsPerToken: c.TopK, NumSharedExperts: c.SharedExperts,
			RoutedExpertHidden: c.LatentDim, MoEIntermediateSize: c.MoEIntermediate, RoutedScalingFactor: c.RoutedScale,
			MoERenormalize: c.MoERenormalize, LatentMoEUseNorm: c.LatentMoENorm, MoERouterActivation: "sigmoid",
			FirstKDenseReplace: c.FirstKDense, IntermediateSize: c.DenseIntermediate, AttnResBlockSize: c.AttnResBlock,
			HiddenAct: "situ", SituBeta: c.SituBeta, SituLinearBeta: c.SituLinearBeta,
			LinearAttnConfig: linear{NumHeads: c.KDAHeads, HeadDim: c.KDAHeadDim, ShortConvKernel: c.ConvKernel,
				GateLowerBound: c.GateLowerBound, FullAttnLayers: c.FullAttnLayers, KDALayers: kda, UseFullRankGate: true},
			QuantizationConfig: quantization{QuantMethod: "compressed-tensors", Format: "mxfp4-pack-quantized",
				ConfigGroups: map[string]quantGroup{"group_0": qg}},
		},
		Synthetic: synthInfo{Generator: "k3 synth", Profile: p.Name, Seed: p.Seed, Version: 1},
	}
	if r.TextConfig.LinearAttnConfig.KDALayers == nil {
		r.TextConfig.LinearAttnConfig.KDALayers = []int{}
	}
	if p.Release {
		return releaseConfig(r, p, c)
	}
	out, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// ConfigJSON returns the config.json the checkpoint carries.
func (L *Layout) ConfigJSON() []byte { return append([]byte(nil), L.configJSON...) }
