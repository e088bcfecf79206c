// Package model implements the Kimi K3 architecture: the configuration
// reader for both config.json layouts, the layer map, the binding of stored
// tensors by name and shape, every operation of the forward pass, and the
// per-sequence state (KDA recurrent state, short-conv histories, the latent
// MLA cache).
package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"strings"
)

// ErrBadConfig reports a config.json that is missing keys, has values of
// the wrong type, or describes an impossible model.
var ErrBadConfig = errors.New("bad model config")

// Config is the Kimi K3 language-model configuration. Field comments give
// the config.json key (flat-layout aliases in brackets).
type Config struct {
	Hidden     int     // hidden_size (E)
	Layers     int     // num_hidden_layers (NL)
	Vocab      int     // vocab_size (V)
	RMSNormEps float32 // rms_norm_eps

	KDAHeads       int     // linear_attn_config.num_heads [kda_num_heads] (Hk)
	KDAHeadDim     int     // linear_attn_config.head_dim [kda_head_dim] (D)
	ConvKernel     int     // short_conv_kernel_size (Kc)
	GateLowerBound float32 // gate_lower_bound
	FullAttnLayers []int   // full_attn_layers: MLA layers, one-based

	MLAHeads      int  // num_attention_heads (H)
	QLoraRank     int  // q_lora_rank (Cq)
	KVLoraRank    int  // kv_lora_rank (Ckv)
	QKNopeDim     int  // qk_nope_head_dim (n)
	QKRopeDim     int  // qk_rope_head_dim (r): projected and cached, never rotated
	VHeadDim      int  // v_head_dim (vh)
	MLAOutputGate bool // mla_use_output_gate (optional, default true)

	Experts           int     // num_experts (Ne)
	TopK              int     // num_experts_per_token (K)
	SharedExperts     int     // num_shared_experts (Ns)
	LatentDim         int     // routed_expert_hidden_size (Lt)
	MoEIntermediate   int     // moe_intermediate_size (I)
	RoutedScale       float32 // routed_scaling_factor
	MoERenormalize    bool    // moe_renormalize (optional, default true)
	LatentMoENorm     bool    // latent_moe_use_norm (optional, default true)
	FirstKDense       int     // first_k_dense_replace
	DenseIntermediate int     // intermediate_size (Id)

	AttnResBlock   int     // attn_res_block_size (B)
	SituBeta       float32 // activation_situ_beta [situ_beta] (β1)
	SituLinearBeta float32 // activation_situ_linear_beta [situ_linear_beta] (β2)

	// MaxPositions is max_position_embeddings, the longest context the
	// model was trained for (optional: zero when the config does not say;
	// the release's is 1,048,576).
	MaxPositions int

	mla []bool // layer map, derived from FullAttnLayers
}

// Limits that keep a hostile config from asking for absurd allocations.
const (
	maxDim    = 1 << 20
	maxLayers = 4096
	maxTopK   = 64
)

// IsMLA reports whether zero-based layer l uses gated MLA (else KDA).
func (c *Config) IsMLA(l int) bool { return c.mla[l] }

// IsDense reports whether layer l has the dense FFN (else MoE).
func (c *Config) IsDense(l int) bool { return l < c.FirstKDense }

// IsBoundary reports whether layer l starts an Attention-Residual block.
func (c *Config) IsBoundary(l int) bool { return l%c.AttnResBlock == 0 }

// NumMLA returns the number of MLA layers.
func (c *Config) NumMLA() int {
	n := 0
	for _, m := range c.mla {
		if m {
			n++
		}
	}
	return n
}

// KDAWidth returns P = Hk·D, the width of KDA q, k, v and the gate.
func (c *Config) KDAWidth() int { return c.KDAHeads * c.KDAHeadDim }

// MLAHeadDim returns dh = n + r, the width of one MLA query/key head.
func (c *Config) MLAHeadDim() int { return c.QKNopeDim + c.QKRopeDim }

// NumBoundaries returns the number of Attention-Residual block boundaries.
func (c *Config) NumBoundaries() int { return (c.Layers + c.AttnResBlock - 1) / c.AttnResBlock }

// ParseConfig reads config.json in either layout: nested (the released
// model: keys under text_config, KDA keys under
// text_config.linear_attn_config) or flat (everything at the root, with the
// aliases kda_num_heads, kda_head_dim, situ_beta, situ_linear_beta). Nothing
// is defaulted except the three optional booleans. Every missing or
// mistyped key is reported in one error wrapping ErrBadConfig.
func ParseConfig(data []byte) (*Config, error) {
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%w: config.json is not a JSON object: %v", ErrBadConfig, err)
	}
	if root == nil {
		return nil, fmt.Errorf("%w: config.json is null", ErrBadConfig)
	}
	r := configReader{}
	text, hasText := root["text_config"].(map[string]any)
	if _, present := root["text_config"]; present && !hasText {
		return nil, fmt.Errorf("%w: text_config is not an object", ErrBadConfig)
	}
	var linear map[string]any
	if hasText {
		linear, _ = text["linear_attn_config"].(map[string]any)
	} else {
		linear, _ = root["linear_attn_config"].(map[string]any)
	}
	// Search order: text_config, linear_attn_config, root; the KDA head
	// keys look in linear_attn_config first because text_config may carry
	// an unrelated head_dim.
	r.order = []map[string]any{text, linear, root}
	r.linearFirst = []map[string]any{linear, text, root}

	c := &Config{}
	c.Hidden = r.int("hidden_size")
	c.Layers = r.int("num_hidden_layers")
	c.Vocab = r.int("vocab_size")
	c.RMSNormEps = r.float("rms_norm_eps")
	c.KDAHeads = r.intLinear("num_heads", "kda_num_heads")
	c.KDAHeadDim = r.intLinear("head_dim", "kda_head_dim")
	c.ConvKernel = r.int("short_conv_kernel_size")
	c.GateLowerBound = r.float("gate_lower_bound")
	c.FullAttnLayers = r.intList("full_attn_layers")
	c.MLAHeads = r.int("num_attention_heads")
	c.QLoraRank = r.int("q_lora_rank")
	c.KVLoraRank = r.int("kv_lora_rank")
	c.QKNopeDim = r.int("qk_nope_head_dim")
	c.QKRopeDim = r.int("qk_rope_head_dim")
	c.VHeadDim = r.int("v_head_dim")
	c.MLAOutputGate = r.optBool("mla_use_output_gate")
	c.Experts = r.int("num_experts")
	c.TopK = r.int("num_experts_per_token")
	c.SharedExperts = r.int("num_shared_experts")
	c.LatentDim = r.int("routed_expert_hidden_size")
	c.MoEIntermediate = r.int("moe_intermediate_size")
	c.RoutedScale = r.float("routed_scaling_factor")
	c.MoERenormalize = r.optBool("moe_renormalize")
	c.LatentMoENorm = r.optBool("latent_moe_use_norm")
	c.FirstKDense = r.int("first_k_dense_replace")
	c.DenseIntermediate = r.int("intermediate_size")
	c.AttnResBlock = r.int("attn_res_block_size")
	c.SituBeta = r.float("activation_situ_beta", "situ_beta")
	c.SituLinearBeta = r.float("activation_situ_linear_beta", "situ_linear_beta")
	c.MaxPositions = r.optInt("max_position_embeddings")
	if err := r.err(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate runs the structural checks and builds the layer map. ParseConfig
// calls it; call it yourself on a Config built by hand.
func (c *Config) Validate() error {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	pos := func(name string, v, limit int) {
		if v <= 0 || v > limit {
			bad("%s = %d must be in 1..%d", name, v, limit)
		}
	}
	pos("hidden_size", c.Hidden, maxDim)
	pos("num_hidden_layers", c.Layers, maxLayers)
	pos("vocab_size", c.Vocab, 1<<24)
	pos("num_heads (KDA)", c.KDAHeads, 4096)
	pos("head_dim (KDA)", c.KDAHeadDim, 4096)
	pos("short_conv_kernel_size", c.ConvKernel, 64)
	pos("num_attention_heads", c.MLAHeads, 4096)
	pos("q_lora_rank", c.QLoraRank, maxDim)
	pos("kv_lora_rank", c.KVLoraRank, maxDim)
	pos("qk_nope_head_dim", c.QKNopeDim, 4096)
	if c.QKRopeDim < 0 || c.QKRopeDim > 4096 {
		bad("qk_rope_head_dim = %d must be in 0..4096", c.QKRopeDim)
	}
	pos("v_head_dim", c.VHeadDim, 4096)
	pos("num_experts", c.Experts, 1<<16)
	pos("routed_expert_hidden_size", c.LatentDim, maxDim)
	pos("moe_intermediate_size", c.MoEIntermediate, maxDim)
	pos("attn_res_block_size", c.AttnResBlock, maxLayers)
	if c.TopK <= 0 || c.TopK > maxTopK || c.TopK > c.Experts {
		bad("num_experts_per_token = %d must be in 1..min(%d, num_experts = %d)", c.TopK, maxTopK, c.Experts)
	}
	if c.SharedExperts < 0 || c.SharedExperts > 64 {
		bad("num_shared_experts = %d must be in 0..64", c.SharedExperts)
	}
	if c.FirstKDense < 0 || c.FirstKDense > c.Layers {
		bad("first_k_dense_replace = %d must be in 0..num_hidden_layers", c.FirstKDense)
	}
	if c.FirstKDense > 0 {
		pos("intermediate_size", c.DenseIntermediate, 1<<22)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(float64(c.RMSNormEps), 0) {
		bad("rms_norm_eps = %v must be positive and finite", c.RMSNormEps)
	}
	for name, v := range map[string]float32{"gate_lower_bound": c.GateLowerBound, "routed_scaling_factor": c.RoutedScale,
		"activation_situ_beta": c.SituBeta, "activation_situ_linear_beta": c.SituLinearBeta} {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			bad("%s = %v must be finite", name, v)
		}
	}
	if c.SituBeta == 0 || c.SituLinearBeta == 0 {
		bad("SiTU betas must be non-zero (have %v, %v)", c.SituBeta, c.SituLinearBeta)
	}
	switch {
	case len(c.FullAttnLayers) == 0:
		bad("full_attn_layers is empty: the layer map needs at least one MLA layer")
	case c.Layers > 0 && len(c.FullAttnLayers) >= c.Layers:
		bad("full_attn_layers has %d entries, must be fewer than num_hidden_layers = %d", len(c.FullAttnLayers), c.Layers)
	}
	if len(p) == 0 {
		c.mla = make([]bool, c.Layers)
		for _, one := range c.FullAttnLayers {
			if one < 1 || one > c.Layers {
				bad("full_attn_layers entry %d out of range 1..%d (entries are one-based)", one, c.Layers)
				continue
			}
			if c.mla[one-1] {
				bad("full_attn_layers lists layer %d twice", one)
			}
			c.mla[one-1] = true
		}
	}
	if len(p) > 0 {
		c.mla = nil
		return fmt.Errorf("%w: %s", ErrBadConfig, strings.Join(p, "; "))
	}
	return nil
}

// configReader looks keys up in several objects and collects every problem.
type configReader struct {
	order, linearFirst []map[string]any
	missing            []string
	mistyped           []string
}

func (r *configReader) lookup(objs []map[string]any, names ...string) (any, string, bool) {
	for _, o := range objs {
		if o == nil {
			continue
		}
		for _, n := range names {
			if v, ok := o[n]; ok {
				return v, n, true
			}
		}
	}
	return nil, "", false
}

func (r *configReader) number(objs []map[string]any, names []string, integer bool) (float64, bool) {
	v, name, ok := r.lookup(objs, names...)
	if !ok {
		r.missing = append(r.missing, strings.Join(names, " or "))
		return 0, false
	}
	num, isNum := v.(json.Number)
	if !isNum {
		r.mistyped = append(r.mistyped, fmt.Sprintf("%s (want a number, have %s)", name, jsonKind(v)))
		return 0, false
	}
	f, err := num.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		r.mistyped = append(r.mistyped, fmt.Sprintf("%s (not a finite number: %s)", name, num))
		return 0, false
	}
	if integer && (f != math.Trunc(f) || math.Abs(f) > 1<<53) {
		r.mistyped = append(r.mistyped, fmt.Sprintf("%s (want an integer, have %s)", name, num))
		return 0, false
	}
	return f, true
}

func (r *configReader) int(names ...string) int {
	f, _ := r.number(r.order, names, true)
	return int(f)
}

// optInt reads an optional positive integer: zero when absent.
func (r *configReader) optInt(name string) int {
	if _, _, ok := r.lookup(r.order, name); !ok {
		return 0
	}
	f, ok := r.number(r.order, []string{name}, true)
	if ok && (f < 1 || f > 1<<40) {
		r.mistyped = append(r.mistyped, fmt.Sprintf("%s (want a positive integer, have %v)", name, f))
		return 0
	}
	return int(f)
}

func (r *configReader) intLinear(names ...string) int {
	f, _ := r.number(r.linearFirst, names, true)
	return int(f)
}

func (r *configReader) float(names ...string) float32 {
	f, _ := r.number(r.order, names, false)
	return float32(f)
}

func (r *configReader) intList(name string) []int {
	v, _, ok := r.lookup(r.order, name)
	if !ok {
		r.missing = append(r.missing, name)
		return nil
	}
	arr, isArr := v.([]any)
	if !isArr {
		r.mistyped = append(r.mistyped, fmt.Sprintf("%s (want a list of integers, have %s)", name, jsonKind(v)))
		return nil
	}
	if len(arr) > maxLayers {
		r.mistyped = append(r.mistyped, fmt.Sprintf("%s (%d entries, more than %d)", name, len(arr), maxLayers))
		return nil
	}
	out := make([]int, 0, len(arr))
	for i, e := range arr {
		num, isNum := e.(json.Number)
		f, err := num.Float64()
		if !isNum || err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
			r.mistyped = append(r.mistyped, fmt.Sprintf("%s[%d] (want an integer, have %v)", name, i, e))
			return nil
		}
		out = append(out, int(f))
	}
	return out
}

// optBool reads one of the three optional booleans: true/false or 0/1;
// absent or of another type means the documented default, true.
func (r *configReader) optBool(name string) bool {
	v, _, ok := r.lookup(r.order, name)
	if !ok {
		return true
	}
	switch x := v.(type) {
	case bool:
		return x
	case json.Number:
		switch x.String() {
		case "0", "0.0":
			return false
		case "1", "1.0":
			return true
		}
	}
	return true
}

func (r *configReader) err() error {
	if len(r.missing) == 0 && len(r.mistyped) == 0 {
		return nil
	}
	var parts []string
	if len(r.missing) > 0 {
		sort.Strings(r.missing)
		parts = append(parts, "missing keys: "+strings.Join(r.missing, ", "))
	}
	if len(r.mistyped) > 0 {
		parts = append(parts, "wrong type: "+strings.Join(r.mistyped, ", "))
	}
	return fmt.Errorf("%w: %s", ErrBadConfig, strings.Join(parts, "; "))
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Fingerprint is a hash of every config value that shapes the state, so a
// state saved with one model is refused by another.
func (c *Config) Fingerprint() uint64 {
	h := crc32.New(castagnoli)
	w := func(vs ...int) {
		for _, v := range vs {
			binary.Write(h, binary.LittleEndian, int64(v))
		}
	}
	w(c.Hidden, c.Layers, c.Vocab, c.KDAHeads, c.KDAHeadDim, c.ConvKernel, c.MLAHeads, c.QLoraRank, c.KVLoraRank,
		c.QKNopeDim, c.QKRopeDim, c.VHeadDim, c.Experts, c.TopK, c.SharedExperts, c.LatentDim, c.MoEIntermediate,
		c.FirstKDense, c.DenseIntermediate, c.AttnResBlock)
	w(c.FullAttnLayers...)
	lo := uint64(h.Sum32())
	binary.Write(h, binary.LittleEndian, math.Float32bits(c.RMSNormEps))
	return lo<<32 | uint64(h.Sum32())
}
