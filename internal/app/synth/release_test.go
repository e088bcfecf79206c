package synth

import (
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// TestReleaseConfig reads the release's config.json (the fixture's copy)
// and the full profile's: both parse, into the same Config; every key the
// profile writes has the release's value (the keys k3 does not read
// included: model_type kimi_linear, grouped top-k with one group, the
// quantization's ignore list, the vision config); and the keys of the
// release that k3 or a reader of the file may look at are all there.
func TestReleaseConfig(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "release-layout/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := model.ParseConfig(raw)
	if err != nil {
		t.Fatalf("the release's config.json: %v", err)
	}
	p := Full()
	c, err := p.config()
	if err != nil {
		t.Fatal(err)
	}
	js, err := configJSON(p, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := model.ParseConfig(js)
	if err != nil {
		t.Fatalf("the full profile's config.json: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("config:\n synth %+v\n release %+v", got, want)
	}
	var rel, syn map[string]any
	if err := json.Unmarshal(raw, &rel); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &syn); err != nil {
		t.Fatal(err)
	}
	delete(syn, "k3_synthetic") // the generator's own record
	var walk func(path string, s, r any)
	walk = func(path string, s, r any) {
		sm, ok := s.(map[string]any)
		if !ok {
			if !reflect.DeepEqual(s, r) {
				t.Errorf("%s: synth %v, release %v", path, s, r)
			}
			return
		}
		rm, ok := r.(map[string]any)
		if !ok {
			t.Errorf("%s: synth has an object, the release %v", path, r)
			return
		}
		for k, v := range sm {
			rv, ok := rm[k]
			if !ok {
				t.Errorf("%s.%s: in synth's config, not in the release's", path, k)
				continue
			}
			walk(path+"."+k, v, rv)
		}
	}
	walk("config", syn, rel)
	text := syn["text_config"].(map[string]any)
	for _, k := range []string{"model_type", "topk_method", "num_expert_group", "topk_group", "num_nextn_predict_layers", "max_position_embeddings", "bos_token_id", "eos_token_id"} {
		if _, ok := text[k]; !ok {
			t.Errorf("text_config.%s missing from synth's config", k)
		}
	}
	for _, k := range []string{"vision_config", "architectures", "model_type", "tie_word_embeddings"} {
		if _, ok := syn[k]; !ok {
			t.Errorf("%s missing from synth's config", k)
		}
	}
}

// TestReleaseLayoutFull checks the full profile's shards against the
// release's header audit (release-layout/README.md): 96 shards named with
// six digits after "of", one layer each, the head's shard, the vision
// projector's 3 tensors and the tower's 165, safetensors' canonical order
// in every shard (F32, BF16, U8; by name within each), the release's F32
// vectors, no __metadata__, headers of 75.77 MB in all.
func TestReleaseLayoutFull(t *testing.T) {
	L, err := PlanLayout(Full(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(L.Shards) != 96 || L.Tensors != 497220 {
		t.Fatalf("%d shards, %d tensors; want 96 and 497,220", len(L.Shards), L.Tensors)
	}
	rank := map[string]int{"F32": 0, "BF16": 1, "U8": 2}
	var headers int64
	for i, sh := range L.Shards {
		if want := releaseShardName(i+1, 96); sh.Name != want || !strings.HasSuffix(sh.Name, "-of-000096.safetensors") {
			t.Fatalf("shard %d is %s, want %s", i+1, sh.Name, want)
		}
		h, err := iox.ParseHeader(sh.header[8:], sh.Size-sh.DataOff)
		if err != nil {
			t.Fatalf("%s: %v", sh.Name, err)
		}
		if h.Metadata != nil || sh.DataOff%8 != 0 {
			t.Fatalf("%s: metadata %v, data at %d", sh.Name, h.Metadata, sh.DataOff)
		}
		headers += sh.DataOff - 8
		for k := 1; k < len(h.Tensors); k++ { // by offset: the file's order
			a, b := h.Tensors[k-1], h.Tensors[k]
			if ra, rb := rank[a.Stored], rank[b.Stored]; ra > rb || (ra == rb && a.Name >= b.Name) {
				t.Fatalf("%s: %s %s before %s %s: not safetensors' order", sh.Name, a.Stored, a.Name, b.Stored, b.Name)
			}
		}
		var prefix string
		switch {
		case i < 93:
			prefix = "language_model.model.layers." + strconv.Itoa(i) + "."
		case i == 94:
			prefix = "mm_projector."
		case i == 95:
			prefix = "vision_tower."
		}
		for _, ti := range h.Tensors {
			if i == 93 {
				if strings.Contains(ti.Name, ".layers.") || !strings.HasPrefix(ti.Name, "language_model.") {
					t.Fatalf("%s holds %s", sh.Name, ti.Name)
				}
			} else if !strings.HasPrefix(ti.Name, prefix) {
				t.Fatalf("%s holds %s, want only %s*", sh.Name, ti.Name, prefix)
			}
			if (strings.HasSuffix(ti.Name, "self_attn.o_norm.weight") || strings.HasSuffix(ti.Name, "gate.e_score_correction_bias")) && ti.Stored != "F32" {
				t.Fatalf("%s is %s, the release's is F32", ti.Name, ti.Stored)
			}
		}
		if n := map[int]int{94: 3, 95: 165, 93: 5, 0: 23, 1: 5404, 3: 5398}[i]; n > 0 && len(h.Tensors) != n {
			t.Fatalf("%s: %d tensors, the release's has %d", sh.Name, len(h.Tensors), n)
		}
	}
	// The release's headers are 75,766,584 bytes in all.
	if headers < 75_700_000 || headers > 75_830_000 {
		t.Fatalf("headers of %d bytes in all, the release's are 75,766,584", headers)
	}
}

// TestSparseTokenizer: a header-only checkpoint of a profile with the
// generated tokenizer gets its files, so that text commands run on it.
func TestSparseTokenizer(t *testing.T) {
	p := Tiny()
	p.Tokenizer, p.Config.Vocab = true, 512
	dir := t.TempDir() + "/sparse"
	if _, err := WriteSparse(dir, p, 0); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tiktoken.model", "tokenizer_config.json", GenerationConfigFile} {
		if fi, err := os.Stat(dir + "/" + f); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
