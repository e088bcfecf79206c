package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// tinyFlat returns the tiny flat config of the spec (§0, tiny column) as a
// JSON object, with moe_intermediate_size i (48 for tiny-f32 and the op
// fixtures, 64 for tiny-mxfp4).
func tinyFlat(i int) map[string]any {
	return map[string]any{
		"hidden_size": 128, "num_hidden_layers": 13, "vocab_size": 256, "rms_norm_eps": 1e-5,
		"tie_word_embeddings": false,
		"kda_num_heads":       4, "kda_head_dim": 16, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
		"num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32,
		"qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_output_gate": true,
		"num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 2,
		"routed_expert_hidden_size": 64, "moe_intermediate_size": i, "routed_scaling_factor": 1.0,
		"moe_renormalize": true, "latent_moe_use_norm": true,
		"first_k_dense_replace": 1, "intermediate_size": 96, "attn_res_block_size": 3,
		"situ_beta": 4.0, "situ_linear_beta": 25.0,
		"full_attn_layers": []any{4, 8, 12, 13},
	}
}

// tinyWant is the Config every tiny config must parse to.
func tinyWant(i int) Config {
	return Config{
		Hidden: 128, Layers: 13, Vocab: 256, RMSNormEps: 1e-5,
		KDAHeads: 4, KDAHeadDim: 16, ConvKernel: 4, GateLowerBound: -5, FullAttnLayers: []int{4, 8, 12, 13},
		MLAHeads: 4, QLoraRank: 64, KVLoraRank: 32, QKNopeDim: 24, QKRopeDim: 8, VHeadDim: 16, MLAOutputGate: true,
		Experts: 8, TopK: 2, SharedExperts: 2, LatentDim: 64, MoEIntermediate: i, RoutedScale: 1,
		MoERenormalize: true, LatentMoENorm: true, FirstKDense: 1, DenseIntermediate: 96,
		AttnResBlock: 3, SituBeta: 4, SituLinearBeta: 25,
	}
}

// realFullAttn is full_attn_layers of the released K3 (one-based).
var realFullAttn = []int{4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93}

// realNested returns the released K3 config in the nested layout, with the
// keys the reader ignores left in, and a text_config head_dim.
func realNested() map[string]any {
	fal := make([]any, len(realFullAttn))
	for i, v := range realFullAttn {
		fal[i] = v
	}
	return map[string]any{
		"architectures": []any{"KimiK3ForConditionalGeneration"},
		"model_type":    "kimi_k3",
		"text_config": map[string]any{
			"hidden_size": 7168, "num_hidden_layers": 93, "vocab_size": 163840, "rms_norm_eps": 1e-5,
			"head_dim":            128,
			"num_attention_heads": 96, "q_lora_rank": 1536, "kv_lora_rank": 512,
			"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
			"mla_use_output_gate": true, "mla_use_nope": true,
			"num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2,
			"routed_expert_hidden_size": 3584, "moe_intermediate_size": 3072, "routed_scaling_factor": 1.0,
			"moe_renormalize": true, "latent_moe_use_norm": true, "moe_router_activation_func": "sigmoid",
			"first_k_dense_replace": 1, "intermediate_size": 33792, "attn_res_block_size": 12,
			"hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
			"num_key_value_heads": 96, "max_position_embeddings": 1048576, "tie_word_embeddings": false,
			"linear_attn_config": map[string]any{
				"num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
				"full_attn_layers": fal, "use_full_rank_gate": true,
			},
		},
	}
}

var realWant = Config{
	Hidden: 7168, Layers: 93, Vocab: 163840, RMSNormEps: 1e-5,
	KDAHeads: 96, KDAHeadDim: 128, ConvKernel: 4, GateLowerBound: -5, FullAttnLayers: realFullAttn,
	MLAHeads: 96, QLoraRank: 1536, KVLoraRank: 512, QKNopeDim: 128, QKRopeDim: 64, VHeadDim: 128, MLAOutputGate: true,
	Experts: 896, TopK: 16, SharedExperts: 2, LatentDim: 3584, MoEIntermediate: 3072, RoutedScale: 1,
	MoERenormalize: true, LatentMoENorm: true, FirstKDense: 1, DenseIntermediate: 33792,
	AttnResBlock: 12, SituBeta: 4, SituLinearBeta: 25, MaxPositions: 1048576,
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseOK(t *testing.T, data []byte) *Config {
	t.Helper()
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}

// sameConfig compares the exported fields.
func sameConfig(t *testing.T, what string, got *Config, want Config) {
	t.Helper()
	g := *got
	g.mla = nil
	if !reflect.DeepEqual(g, want) {
		gv, wv := reflect.ValueOf(g), reflect.ValueOf(want)
		for i := range gv.NumField() {
			if gv.Type().Field(i).IsExported() && !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
				t.Errorf("%s: %s = %v, want %v", what, gv.Type().Field(i).Name, gv.Field(i).Interface(), wv.Field(i).Interface())
			}
		}
	}
}

// parseErr parses data, requires an ErrBadConfig error and returns its text.
func parseErr(t *testing.T, data []byte) string {
	t.Helper()
	c, err := ParseConfig(data)
	if err == nil {
		t.Fatalf("accepted: %+v", c)
	}
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("error %q does not wrap ErrBadConfig", err)
	}
	if c != nil {
		t.Errorf("a Config came back with the error %v", err)
	}
	return err.Error()
}

func readFixture(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixtures.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseConfigFixtures(t *testing.T) {
	t.Run("tiny-f32 nested", func(t *testing.T) {
		sameConfig(t, "tiny-f32", parseOK(t, readFixture(t, "oracle/tiny-f32/config.json")), tinyWant(48))
	})
	t.Run("tiny-mxfp4 flat", func(t *testing.T) {
		sameConfig(t, "tiny-mxfp4", parseOK(t, readFixture(t, "oracle/tiny-mxfp4/config.json")), tinyWant(64))
	})
	t.Run("ops manifest", func(t *testing.T) {
		var m struct {
			Config json.RawMessage `json:"config"`
		}
		if err := json.Unmarshal(readFixture(t, "ops/MANIFEST.json"), &m); err != nil {
			t.Fatal(err)
		}
		sameConfig(t, "MANIFEST", parseOK(t, m.Config), tinyWant(48))
	})
}

func TestParseConfigTinyLayerMap(t *testing.T) {
	c := parseOK(t, mustJSON(t, tinyFlat(48)))
	sameConfig(t, "tiny flat", c, tinyWant(48))
	var m strings.Builder
	for l := range c.Layers {
		if c.IsMLA(l) {
			m.WriteByte('M')
		} else {
			m.WriteByte('K')
		}
	}
	if m.String() != "KKKMKKKMKKKMM" {
		t.Errorf("layer map %s, want KKKMKKKMKKKMM", m.String())
	}
	var b []int
	for l := range c.Layers {
		if c.IsBoundary(l) {
			b = append(b, l)
		}
	}
	if fmt.Sprint(b) != "[0 3 6 9 12]" || c.NumBoundaries() != 5 {
		t.Errorf("boundaries %v (NumBoundaries %d), want [0 3 6 9 12] (5)", b, c.NumBoundaries())
	}
}

func TestParseConfigRealK3(t *testing.T) {
	nested := realNested()
	c := parseOK(t, mustJSON(t, nested))
	sameConfig(t, "real nested", c, realWant)

	var mla, kda, dense []int
	for l := range c.Layers {
		if c.IsMLA(l) {
			mla = append(mla, l)
		} else {
			kda = append(kda, l)
		}
		if c.IsDense(l) {
			dense = append(dense, l)
		}
		if want := l%12 == 0; c.IsBoundary(l) != want {
			t.Errorf("IsBoundary(%d) = %v", l, !want)
		}
	}
	var wantMLA []int
	for l := 3; l <= 91; l += 4 {
		wantMLA = append(wantMLA, l)
	}
	wantMLA = append(wantMLA, 92)
	if fmt.Sprint(mla) != fmt.Sprint(wantMLA) {
		t.Errorf("MLA layers %v, want %v", mla, wantMLA)
	}
	if len(mla) != 24 || len(kda) != 69 || c.NumMLA() != 24 {
		t.Errorf("%d MLA (NumMLA %d) and %d KDA layers, want 24 and 69", len(mla), c.NumMLA(), len(kda))
	}
	if !c.IsMLA(91) || !c.IsMLA(92) || c.IsMLA(90) || c.IsMLA(0) {
		t.Error("layers 91 and 92 must both be MLA, 0 and 90 KDA")
	}
	if fmt.Sprint(dense) != "[0]" {
		t.Errorf("dense layers %v, want [0]", dense)
	}
	if c.NumBoundaries() != 8 {
		t.Errorf("NumBoundaries %d, want 8 (0, 12, …, 84)", c.NumBoundaries())
	}
	if c.KDAWidth() != 12288 || c.MLAHeadDim() != 192 {
		t.Errorf("P = %d, dh = %d; want 12288, 192", c.KDAWidth(), c.MLAHeadDim())
	}

	// The same model in the flat layout (aliases, everything at the root)
	// parses to the same Config.
	text := nested["text_config"].(map[string]any)
	flat := map[string]any{}
	for k, v := range text {
		if k != "linear_attn_config" && k != "head_dim" {
			flat[k] = v
		}
	}
	la := text["linear_attn_config"].(map[string]any)
	flat["kda_num_heads"], flat["kda_head_dim"] = la["num_heads"], la["head_dim"]
	flat["short_conv_kernel_size"], flat["gate_lower_bound"] = la["short_conv_kernel_size"], la["gate_lower_bound"]
	flat["full_attn_layers"] = la["full_attn_layers"]
	flat["situ_beta"], flat["situ_linear_beta"] = flat["activation_situ_beta"], flat["activation_situ_linear_beta"]
	delete(flat, "activation_situ_beta")
	delete(flat, "activation_situ_linear_beta")
	sameConfig(t, "real flat", parseOK(t, mustJSON(t, flat)), realWant)
}

// The KDA head keys come from linear_attn_config first: text_config may
// carry an unrelated head_dim.
func TestParseConfigLinearFirst(t *testing.T) {
	n := realNested()
	text := n["text_config"].(map[string]any)
	text["head_dim"] = 999
	text["num_heads"] = 7
	c := parseOK(t, mustJSON(t, n))
	if c.KDAHeadDim != 128 || c.KDAHeads != 96 {
		t.Errorf("KDA heads %d × %d, want 96 × 128 from linear_attn_config", c.KDAHeads, c.KDAHeadDim)
	}
	// Without text_config, a root-level linear_attn_config is read.
	flat := tinyFlat(48)
	delete(flat, "kda_num_heads")
	delete(flat, "kda_head_dim")
	flat["linear_attn_config"] = map[string]any{"num_heads": 2, "head_dim": 32}
	c = parseOK(t, mustJSON(t, flat))
	if c.KDAHeads != 2 || c.KDAHeadDim != 32 {
		t.Errorf("root linear_attn_config: KDA heads %d × %d, want 2 × 32", c.KDAHeads, c.KDAHeadDim)
	}
}

func TestParseConfigRefusesFixtures(t *testing.T) {
	for _, tc := range []struct {
		file  string
		names []string
	}{
		{"cfg/no_layermap.json", []string{"missing", "full_attn_layers"}},
		{"cfg/bad_layer_index.json", []string{"full_attn_layers", "999"}},
		{"cfg/bad_topk.json", []string{"num_experts_per_token", "128"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			msg := parseErr(t, readFixture(t, tc.file))
			for _, n := range tc.names {
				if !strings.Contains(msg, n) {
					t.Errorf("error %q does not mention %q", msg, n)
				}
			}
		})
	}
}

func TestParseConfigMissingKeys(t *testing.T) {
	cfg := tinyFlat(48)
	gone := []string{"hidden_size", "vocab_size", "q_lora_rank", "full_attn_layers", "rms_norm_eps"}
	for _, k := range gone {
		delete(cfg, k)
	}
	// An alias pair missing entirely is reported under both names.
	delete(cfg, "situ_beta")
	msg := parseErr(t, mustJSON(t, cfg))
	for _, k := range append(gone, "situ_beta") {
		if !strings.Contains(msg, k) {
			t.Errorf("error %q does not report missing %q", msg, k)
		}
	}
	// Nothing is defaulted: the nested file without its linear_attn_config
	// loses the KDA keys and the layer map.
	n := realNested()
	delete(n["text_config"].(map[string]any), "linear_attn_config")
	msg = parseErr(t, mustJSON(t, n))
	for _, k := range []string{"num_heads", "short_conv_kernel_size", "gate_lower_bound", "full_attn_layers"} {
		if !strings.Contains(msg, k) {
			t.Errorf("error %q does not report missing %q", msg, k)
		}
	}
}

func TestParseConfigWrongTypes(t *testing.T) {
	for _, tc := range []struct {
		key string
		val any
	}{
		{"hidden_size", "128"},
		{"hidden_size", 128.5},
		{"num_hidden_layers", nil},
		{"rms_norm_eps", true},
		{"gate_lower_bound", []any{-5}},
		{"full_attn_layers", "4,8,12,13"},
		{"full_attn_layers", []any{4, "8", 12}},
		{"full_attn_layers", []any{4, 8.5}},
		{"num_experts", map[string]any{"n": 8}},
	} {
		t.Run(fmt.Sprintf("%s=%v", tc.key, tc.val), func(t *testing.T) {
			cfg := tinyFlat(48)
			cfg[tc.key] = tc.val
			msg := parseErr(t, mustJSON(t, cfg))
			if !strings.Contains(msg, tc.key) {
				t.Errorf("error %q does not name %s", msg, tc.key)
			}
		})
	}
	// Every wrong type is reported in one error.
	cfg := tinyFlat(48)
	cfg["hidden_size"], cfg["v_head_dim"] = "x", false
	msg := parseErr(t, mustJSON(t, cfg))
	if !strings.Contains(msg, "hidden_size") || !strings.Contains(msg, "v_head_dim") {
		t.Errorf("error %q does not report both wrong types", msg)
	}
	for _, bad := range []string{"", "{", "[]", "null", "42", `"config"`, `{"text_config": 3}`} {
		parseErr(t, []byte(bad))
	}
}

func TestParseConfigOptionalBools(t *testing.T) {
	keys := map[string]func(*Config) bool{
		"mla_use_output_gate": func(c *Config) bool { return c.MLAOutputGate },
		"moe_renormalize":     func(c *Config) bool { return c.MoERenormalize },
		"latent_moe_use_norm": func(c *Config) bool { return c.LatentMoENorm },
	}
	absent := struct{}{}
	for key, get := range keys {
		for _, tc := range []struct {
			val  any
			want bool
		}{
			{absent, true}, {true, true}, {false, false}, {1, true}, {0, false},
			{"false", true}, {nil, true}, // wrong types fall back to the default
		} {
			t.Run(fmt.Sprintf("%s=%v", key, tc.val), func(t *testing.T) {
				cfg := tinyFlat(48)
				if tc.val == absent {
					delete(cfg, key)
				} else {
					cfg[key] = tc.val
				}
				c := parseOK(t, mustJSON(t, cfg))
				if got := get(c); got != tc.want {
					t.Errorf("%s = %v, want %v", key, got, tc.want)
				}
			})
		}
	}
	// In the nested layout too; and the other two stay at their defaults.
	n := realNested()
	text := n["text_config"].(map[string]any)
	text["moe_renormalize"] = 0
	delete(text, "mla_use_output_gate")
	c := parseOK(t, mustJSON(t, n))
	if c.MoERenormalize || !c.MLAOutputGate || !c.LatentMoENorm {
		t.Errorf("nested: renormalize %v, output gate %v, latent norm %v; want false, true, true", c.MoERenormalize, c.MLAOutputGate, c.LatentMoENorm)
	}
}

// TestParseConfigMaxPositions: max_position_embeddings is optional (zero
// when absent); present, it must be a positive integer.
func TestParseConfigMaxPositions(t *testing.T) {
	absent := struct{}{}
	for _, tc := range []struct {
		val  any
		want int
		ok   bool
	}{{absent, 0, true}, {4096, 4096, true}, {1048576, 1048576, true}, {0, 0, false}, {-5, 0, false}, {"4096", 0, false}, {1.5, 0, false}} {
		cfg := tinyFlat(48)
		if tc.val == absent {
			delete(cfg, "max_position_embeddings")
		} else {
			cfg["max_position_embeddings"] = tc.val
		}
		c, err := ParseConfig(mustJSON(t, cfg))
		switch {
		case tc.ok && (err != nil || c.MaxPositions != tc.want):
			t.Errorf("max_position_embeddings %v: %v, %v; want %d", tc.val, c, err, tc.want)
		case !tc.ok && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "max_position_embeddings")):
			t.Errorf("max_position_embeddings %v: %v, want a bad config naming the key", tc.val, err)
		}
	}
}

func TestParseConfigStructure(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"empty layer map", func(m map[string]any) { m["full_attn_layers"] = []any{} }, "full_attn_layers"},
		{"every layer MLA", func(m map[string]any) {
			l := make([]any, 13)
			for i := range l {
				l[i] = i + 1
			}
			m["full_attn_layers"] = l
		}, "full_attn_layers"},
		{"zero-based entry", func(m map[string]any) { m["full_attn_layers"] = []any{0, 4, 8} }, "full_attn_layers"},
		{"entry past the end", func(m map[string]any) { m["full_attn_layers"] = []any{4, 14} }, "14"},
		{"top-k over 64", func(m map[string]any) { m["num_experts"], m["num_experts_per_token"] = 896, 65 }, "num_experts_per_token"},
		{"top-k over experts", func(m map[string]any) { m["num_experts_per_token"] = 9 }, "num_experts_per_token"},
		{"block size 0", func(m map[string]any) { m["attn_res_block_size"] = 0 }, "attn_res_block_size"},
		{"conv kernel 0", func(m map[string]any) { m["short_conv_kernel_size"] = 0 }, "short_conv_kernel_size"},
		{"no layers", func(m map[string]any) { m["num_hidden_layers"] = 0 }, "num_hidden_layers"},
		{"no hidden", func(m map[string]any) { m["hidden_size"] = -1 }, "hidden_size"},
		{"no vocabulary", func(m map[string]any) { m["vocab_size"] = 0 }, "vocab_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyFlat(48)
			tc.edit(cfg)
			if msg := parseErr(t, mustJSON(t, cfg)); !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not mention %s", msg, tc.want)
			}
		})
	}
	// Limits that hold exactly are accepted: K = 64 of 896 experts, Kc = 1.
	cfg := tinyFlat(48)
	cfg["num_experts"], cfg["num_experts_per_token"], cfg["short_conv_kernel_size"] = 896, 64, 1
	c := parseOK(t, mustJSON(t, cfg))
	if c.TopK != 64 || c.ConvKernel != 1 {
		t.Errorf("TopK %d, Kc %d", c.TopK, c.ConvKernel)
	}
}

// FuzzParseConfig: arbitrary bytes never panic; an error always wraps
// ErrBadConfig; an accepted config is structurally sound.
func FuzzParseConfig(f *testing.F) {
	dir, _ := fixtures.Dir()
	for _, rel := range []string{"oracle/tiny-f32/config.json", "oracle/tiny-mxfp4/config.json",
		"cfg/no_layermap.json", "cfg/bad_layer_index.json", "cfg/bad_topk.json"} {
		if b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel))); err == nil {
			f.Add(b)
		}
	}
	f.Add(mustJSON(f, tinyFlat(48)))
	f.Add(mustJSON(f, realNested()))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("error %v does not wrap ErrBadConfig", err)
			}
			if c != nil {
				t.Fatal("a Config came back with an error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		if c.Layers <= 0 || c.Hidden <= 0 || c.Vocab <= 0 || c.AttnResBlock <= 0 || c.ConvKernel < 1 ||
			c.TopK < 1 || c.TopK > 64 || c.TopK > c.Experts || len(c.FullAttnLayers) >= c.Layers {
			t.Fatalf("accepted an unsound config: %+v", c)
		}
		n := 0
		for l := range c.Layers {
			if c.IsMLA(l) {
				n++
			}
			_ = c.IsBoundary(l)
			_ = c.IsDense(l)
		}
		if n != len(c.FullAttnLayers) || n != c.NumMLA() {
			t.Fatalf("%d MLA layers for %d full_attn_layers entries", n, len(c.FullAttnLayers))
		}
	})
}
