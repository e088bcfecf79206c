// Package synth writes synthetic Kimi K3 checkpoints in the released format:
// a nested config.json, sharded safetensors files with
// model.safetensors.index.json, BF16 trunk matrices, MXFP4 routed experts
// whose six tensors form one contiguous run, and F32/BF16 vectors with the
// dtypes of the release. Nobody can download the 1.56 TB checkpoint, so the
// engine is measured on these: real per-tensor widths, fewer layers and
// experts.
//
// The weights are random but deterministic from the seed (the same profile
// and seed give byte-identical files, whatever the thread count, chunk size
// or I/O mode; a golden test pins the tiny checkpoint's bytes), and
// scaled so that activations stay finite and routing is spread over every
// expert. They are generated with a counter-based generator keyed by
// (seed, tensor name), so any byte range of any tensor can be produced
// independently; the writer fills whole file chunks in parallel and writes
// them at close to the disk's speed.
package synth

import (
	"fmt"
	"strings"

	"github.com/k3go/k3/model"
	"github.com/k3go/k3/quant"
)

// Profile is the model a synthetic checkpoint describes and the seed of its
// weights.
type Profile struct {
	// Name is "tiny", "medium" or "custom"; it is recorded in config.json.
	Name string
	// Config is the model. FullAttnLayers is one-based, as in config.json.
	// The derived layer map is rebuilt by Validate; it need not be set.
	Config model.Config
	// Seed selects the weights.
	Seed uint64
	// Tokenizer makes Write add the generated tokenizer for the
	// vocabulary (see GenerateTokenizer), as WriteOptions.GenerateTokenizer
	// does.
	Tokenizer bool
	// ShardSize is the shard size PlanLayout uses when it is given none
	// (zero: DefaultShardSize).
	ShardSize int64
	// Release lays the checkpoint out as moonshotai/Kimi-K3's files are
	// (see ReleaseLayout) instead of packing units into shards of
	// ShardSize.
	Release bool
	// Vision is the vision tower and projector a release layout carries
	// beside the language model (k3 reads none of it); with Release only.
	Vision Vision
}

// DefaultSeed is the seed of the presets.
const DefaultSeed = 1

// Tiny returns the oracle-sized profile: hidden 128, 13 layers with MLA at
// one-based 4, 8, 12 and 13, 4 KDA heads of 16, 4 MLA heads, 8 MXFP4
// experts (top 2) of width 64 with 2 shared, latent 64, dense 96, vocabulary
// 256, Attention-Residual block 3. A checkpoint is about 4 MB.
func Tiny() Profile {
	return Profile{Name: "tiny", Seed: DefaultSeed, Config: model.Config{
		Hidden: 128, Layers: 13, Vocab: 256, RMSNormEps: 1e-5,
		KDAHeads: 4, KDAHeadDim: 16, ConvKernel: 4, GateLowerBound: -5, FullAttnLayers: MLALayers(13),
		MLAHeads: 4, QLoraRank: 64, KVLoraRank: 32, QKNopeDim: 24, QKRopeDim: 8, VHeadDim: 16, MLAOutputGate: true,
		Experts: 8, TopK: 2, SharedExperts: 2, LatentDim: 64, MoEIntermediate: 64, RoutedScale: 1,
		MoERenormalize: true, LatentMoENorm: true, FirstKDense: 1, DenseIntermediate: 96,
		AttnResBlock: 3, SituBeta: 4, SituLinearBeta: 25,
	}}
}

// Medium returns a profile with the real Kimi K3 widths (hidden 7168, 96
// KDA heads of 128, 96 MLA heads, ranks 1536/512, nope 128, rope 64, v 128,
// latent 3584, expert width 3072 so that one expert is exactly 17,547,264
// bytes, 2 shared experts, dense width 33792 on layer 0, top 16, block 12)
// but 4 layers (KDA, KDA, KDA, MLA), 64 experts per layer and a 32,768-token
// vocabulary: about 10 GB.
func Medium() Profile {
	return Profile{Name: "medium", Seed: DefaultSeed, Config: model.Config{
		Hidden: 7168, Layers: 4, Vocab: 32768, RMSNormEps: 1e-5,
		KDAHeads: 96, KDAHeadDim: 128, ConvKernel: 4, GateLowerBound: -5, FullAttnLayers: MLALayers(4),
		MLAHeads: 96, QLoraRank: 1536, KVLoraRank: 512, QKNopeDim: 128, QKRopeDim: 64, VHeadDim: 128, MLAOutputGate: true,
		Experts: 64, TopK: 16, SharedExperts: 2, LatentDim: 3584, MoEIntermediate: 3072, RoutedScale: 1,
		MoERenormalize: true, LatentMoENorm: true, FirstKDense: 1, DenseIntermediate: 33792,
		AttnResBlock: 12, SituBeta: 4, SituLinearBeta: 25,
	}}
}

// Quickstart returns the profile of the quick start, the examples and
// the runnable documentation: Tiny with a 512-token vocabulary and the
// generated tokenizer (GenerateTokenizer), so that text goes in and out.
// A checkpoint is about 4 MB. Its weights are random: the text it writes
// is fluent in nothing.
func Quickstart() Profile {
	p := Tiny()
	p.Name = "quickstart"
	p.Config.Vocab = 512
	p.Tokenizer = true
	return p
}

// presets are the named profiles, in the order k3 synth lists them, with
// what each one is; ByName finds them (and "released", another name of
// full). The command's help, its errors and the README list these.
var presets = []struct {
	name, about string
	new         func() Profile
}{
	{"tiny", "oracle-sized, about 4 MB", Tiny},
	{"medium", "real K3 widths, 4 layers, 64 experts, 32,768 vocabulary, about 10 GB, 17,547,264 bytes per expert", Medium},
	{"quickstart", "tiny with a 512-token vocabulary and a generated tokenizer", Quickstart},
	{"full", "the released Kimi K3's shape: 93 layers, 896 experts, 163,840 vocabulary, 96 shards, 1.56 TB; " +
		"use --sparse: headers and holes, in seconds (\"released\" is the same)", Full},
}

// ProfileNames returns the names of the preset profiles, in the order
// ProfileHelp describes them.
func ProfileNames() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.name
	}
	return names
}

// ProfileHelp describes every preset profile, one per line (wrapped at
// 80 columns): its name and what it is, each line starting with indent.
func ProfileHelp(indent string) string {
	var b strings.Builder
	for _, p := range presets {
		line := fmt.Sprintf("%s%-11s", indent, p.name)
		cont := strings.Repeat(" ", len(line))
		for _, w := range strings.Fields(p.about) {
			if len(line)+1+len(w) > 80 && strings.TrimSpace(line) != "" && len(line) > len(cont) {
				b.WriteString(line + "\n")
				line = cont
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// ByName returns the preset profile called name (ProfileNames; "released"
// is Full under its first name).
func ByName(name string) (Profile, error) {
	if name == "released" {
		return Released(), nil
	}
	for _, p := range presets {
		if p.name == name {
			return p.new(), nil
		}
	}
	return Profile{}, fmt.Errorf("synth: unknown profile %q (want %s)", name, strings.Join(ProfileNames(), ", "))
}

// MLALayers returns the one-based full_attn_layers of an n-layer model laid
// out like Kimi K3: every fourth layer and the last one (for 93 layers that
// is the released list 4, 8, …, 92, 93; for 13 the tiny oracles' 4, 8, 12,
// 13; for 4 just 4). n must be at least 2 for the list to be shorter than
// the model.
func MLALayers(n int) []int {
	var out []int
	for l := 4; l <= n; l += 4 {
		out = append(out, l)
	}
	if n >= 1 && (len(out) == 0 || out[len(out)-1] != n) {
		out = append(out, n)
	}
	return out
}

// SetLayers changes the number of layers and rebuilds the layer map with
// MLALayers.
func (p *Profile) SetLayers(n int) {
	p.Config.Layers = n
	p.Config.FullAttnLayers = MLALayers(n)
}

// Validate checks that the profile describes a model k3 can load and that
// the synthetic writer can produce: the config's structural checks, and
// MXFP4 expert widths that are multiples of the group size.
func (p *Profile) Validate() error {
	c := p.Config // a copy: Validate builds the layer map
	c.FullAttnLayers = append([]int(nil), c.FullAttnLayers...)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("synth: profile %s: %w", p.Name, err)
	}
	if c.LatentDim%quant.GroupSize != 0 || c.MoEIntermediate%quant.GroupSize != 0 {
		return fmt.Errorf("synth: profile %s: routed_expert_hidden_size %d and moe_intermediate_size %d must be multiples of %d (MXFP4 groups)",
			p.Name, c.LatentDim, c.MoEIntermediate, quant.GroupSize)
	}
	if c.FirstKDense < c.Layers && c.Experts < 1 {
		return fmt.Errorf("synth: profile %s: no experts", p.Name)
	}
	return nil
}

// config returns a validated copy of the profile's config (layer map built).
func (p *Profile) config() (*model.Config, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := p.Config
	c.FullAttnLayers = append([]int(nil), c.FullAttnLayers...)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}
