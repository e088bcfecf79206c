package synth

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/k3go/k3/model"
	"github.com/k3go/k3/tensor"
)

// Vision is the shape of the vision tower and projector that a release
// layout carries beside the language model, as the release's
// vision_config describes them. k3 reads none of it: these tensors are
// there so that the engine meets, and ignores, everything the release's
// files hold. Their names follow the release's two prefixes
// (vision_tower., mm_projector.) and its counts (165 and 3 tensors); the
// rest of each name is not known from the release and is this package's.
type Vision struct {
	// Hidden is vt_hidden_size, QKV qkv_hidden_size, Intermediate
	// vt_intermediate_size, Layers vt_num_hidden_layers, Heads
	// vt_num_attention_heads.
	Hidden, QKV, Intermediate, Layers, Heads int
	// Patch is patch_size; PosHeight and PosWidth the learned position
	// grid (init_pos_emb_height, _width); Merge the side of the square of
	// patches merged into one projector input (merge_kernel_size).
	Patch, PosHeight, PosWidth, Merge int
}

// ReleaseVision is the release's vision_config: a 27-layer tower of width
// 1024 and a projector from 2×2 merged patches to the language model.
func ReleaseVision() Vision {
	return Vision{Hidden: 1024, QKV: 1536, Intermediate: 4096, Layers: 27, Heads: 12, Patch: 14, PosHeight: 64, PosWidth: 64, Merge: 2}
}

// smallVision is a vision tower with the release's tensor count at tiny
// widths, for small profiles in the release layout.
func smallVision() Vision {
	return Vision{Hidden: 32, QKV: 48, Intermediate: 64, Layers: 27, Heads: 2, Patch: 2, PosHeight: 4, PosWidth: 4, Merge: 2}
}

// ReleaseLayout returns p laid out as the files of moonshotai/Kimi-K3
// are (a public audit of the release's shard headers):
//
//   - one layer per shard: layer L (its trunk and its experts) in shard
//     L+1; then a shard with the embedding, the head and the final norms;
//     one with the vision projector (3 tensors); one with the vision tower
//     (165 tensors); named model-000NN-of-0000MM.safetensors (five digits,
//     then six);
//   - inside a shard, safetensors' canonical order: F32 tensors first,
//     then BF16, then U8, each group by name; so a layer's trunk is
//     several extents (its F32 vectors, then its BF16 matrices with the
//     FFN block before the attention), and each expert's six tensors are
//     one run;
//   - the release's dtypes: self_attn.o_norm.weight and
//     block_sparse_moe.gate.e_score_correction_bias are F32;
//   - headers without __metadata__, padded to 8 bytes as safetensors pads
//     them, so the data sections do not start on a page;
//   - the release's config.json keys (text_config.model_type
//     "kimi_linear", topk_method "noaux_tc" with one group, the vision
//     config).
//
// A profile at the real widths (hidden 7168) gets ReleaseVision, any other
// a vision tower of the same tensors at tiny widths.
func ReleaseLayout(p Profile) Profile {
	p.Release = true
	p.Vision = smallVision()
	if p.Config.Hidden == 7168 {
		p.Vision = ReleaseVision()
	}
	return p
}

// releaseShardName is the release's name of shard i (one-based) of n.
func releaseShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%06d.safetensors", i, n) }

// dtypeRank orders dtypes as safetensors lays tensors out: the widest
// elements first.
func dtypeRank(d tensor.DType) int {
	switch d {
	case tensor.F32:
		return 0
	case tensor.BF16, tensor.F16:
		return 1
	}
	return 2
}

// canonical sorts a shard's tensors into safetensors' order: by dtype
// (F32, BF16, U8), then by name.
func canonical(ts []Tensor) {
	slices.SortStableFunc(ts, func(a, b Tensor) int {
		if c := cmp.Compare(dtypeRank(a.DType), dtypeRank(b.DType)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// visionUnits returns the vision projector's unit and the vision tower's:
// BF16 matrices and norm gains with the shapes v describes, projecting
// into a language model of width hidden.
func visionUnits(b *builder, v Vision, hidden int) (projector, tower unit) {
	merged := v.Merge * v.Merge * v.Hidden
	b.gain("mm_projector.pre_norm.weight", v.Hidden)
	b.linear("mm_projector.proj.0.weight", merged, merged)
	b.linear("mm_projector.proj.2.weight", hidden, merged)
	projector = b.take()

	fanIn := 3 * v.Patch * v.Patch
	b.add("vision_tower.patch_embed.proj.weight", tensor.BF16, []int{v.Hidden, 3, v.Patch, v.Patch},
		normalBF16{key: b.key("vision_tower.patch_embed.proj.weight"), tab: normalTable(1 / math.Sqrt(float64(fanIn)))})
	b.add("vision_tower.patch_embed.pos_emb.weight", tensor.BF16, []int{v.PosHeight, v.PosWidth, v.Hidden},
		normalBF16{key: b.key("vision_tower.patch_embed.pos_emb.weight"), tab: normalTable(0.02)})
	for l := 0; l < v.Layers; l++ {
		pre := fmt.Sprintf("vision_tower.encoder.blocks.%d.", l)
		b.gain(pre+"norm0.weight", v.Hidden)
		b.gain(pre+"norm1.weight", v.Hidden)
		b.linear(pre+"wqkv.weight", 3*v.QKV, v.Hidden)
		b.linear(pre+"wo.weight", v.Hidden, v.QKV)
		b.linear(pre+"mlp.fc0.weight", v.Intermediate, v.Hidden)
		b.linear(pre+"mlp.fc1.weight", v.Hidden, v.Intermediate)
	}
	b.gain("vision_tower.encoder.final_layernorm.weight", v.Hidden)
	tower = b.take()
	return projector, tower
}

// releaseConfig returns config.json as the release writes it: base (the
// nested config every profile gets) with the release's other keys, those
// k3 does not read included, so that the engine meets the real file's
// shape (text_config.model_type "kimi_linear", grouped top-k keys with one
// group, the quantization's ignore list, the vision config). The values
// are the release's where they do not depend on the profile.
func releaseConfig(base any, p Profile, c *model.Config) ([]byte, error) {
	raw, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var root map[string]any
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	text := root["text_config"].(map[string]any)
	set := func(m map[string]any, kv ...any) {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
	}
	set(text,
		"model_type", "kimi_linear", "architectures", []string{"KimiLinearForCausalLM"}, "dtype", "bfloat16",
		"topk_method", "noaux_tc", "num_expert_group", 1, "topk_group", 1, "use_grouped_topk", true,
		"moe_layer_freq", 1, "max_position_embeddings", 1048576, "initializer_range", 0.02, "use_cache", true)
	q := text["quantization_config"].(map[string]any)
	set(q, "quantization_status", "compressed", "kv_cache_scheme", nil, "global_compression_ratio", nil,
		"ignore", []string{`re:.*self_attn.*`, `re:.*shared_experts.*`, `re:.*mlp\.(gate|up|gate_up|down)_proj.*`, `re:.*lm_head.*`, `re:.*vision_tower.*`, `re:.*mm_projector.*`})
	w := q["config_groups"].(map[string]any)["group_0"].(map[string]any)
	set(w, "format", "mxfp4-pack-quantized", "input_activations", nil, "output_activations", nil)
	set(w["weights"].(map[string]any), "symmetric", true, "dynamic", false, "observer", "minmax", "scale_dtype", "torch.uint8", "actorder", nil)
	v := p.Vision
	set(root, "dtype", "bfloat16", "tie_word_embeddings", false, "vision_config", map[string]any{
		"vt_hidden_size": v.Hidden, "qkv_hidden_size": v.QKV, "vt_intermediate_size": v.Intermediate,
		"vt_num_hidden_layers": v.Layers, "vt_num_attention_heads": v.Heads, "patch_size": v.Patch,
		"init_pos_emb_height": v.PosHeight, "init_pos_emb_width": v.PosWidth, "merge_kernel_size": []int{v.Merge, v.Merge},
		"mm_hidden_size": v.Hidden, "text_hidden_size": c.Hidden, "norm_type": "rmsnorm", "attn_bias": false, "linear_bias": false,
	})
	// The release's special-token ids exist only in its vocabulary.
	if c.Vocab == 163840 {
		for _, m := range []map[string]any{root, text} {
			set(m, "bos_token_id", 163584, "eos_token_id", 163586, "pad_token_id", 163839)
		}
	}
	out, err := json.MarshalIndent(root, "", " ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
