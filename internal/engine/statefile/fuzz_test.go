package statefile

import (
	"bytes"
	"errors"
	"testing"

	"github.com/k3go/k3/model"
)

// FuzzStateLoad feeds arbitrary bytes (seeded with a real state file and
// damaged copies) to State.Load: it must fail cleanly or load a state that
// is consistent, and never allocate from a hostile header.
func FuzzStateLoad(f *testing.F) {
	raw := []byte(`{"hidden_size":16,"num_hidden_layers":3,"vocab_size":32,"rms_norm_eps":1e-5,"kda_num_heads":2,"kda_head_dim":4,
	"short_conv_kernel_size":3,"gate_lower_bound":-5,"full_attn_layers":[3],"num_attention_heads":2,"q_lora_rank":8,"kv_lora_rank":4,
	"qk_nope_head_dim":4,"qk_rope_head_dim":2,"v_head_dim":4,"num_experts":4,"num_experts_per_token":2,"num_shared_experts":1,
	"routed_expert_hidden_size":8,"moe_intermediate_size":8,"routed_scaling_factor":1,"first_k_dense_replace":1,"intermediate_size":8,
	"attn_res_block_size":2,"situ_beta":4,"situ_linear_beta":25}`)
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		f.Fatal(err)
	}
	st := model.NewState(cfg, 8)
	if _, err := st.Extend(3); err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Save(&buf, st, "fp", []int{1, 2, 3}, []int{4}, nil); err != nil {
		f.Fatal(err)
	}
	good := buf.Bytes()
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append([]byte{}, good[:20]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := model.NewState(cfg, 8)
		tokens, pending, err := Load(bytes.NewReader(data), int64(len(data)), s, "fp", nil)
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("error does not wrap ErrBadState: %v", err)
			}
			if s.Len() != 0 {
				t.Fatal("a failed load left positions in the state")
			}
			return
		}
		if len(tokens) != s.Len() || s.Len() > s.Cap() {
			t.Fatalf("loaded %d tokens into a state of %d positions (cap %d)", len(tokens), s.Len(), s.Cap())
		}
		for _, id := range append(tokens, pending...) {
			if id < 0 || id >= cfg.Vocab {
				t.Fatalf("token %d outside the vocabulary", id)
			}
		}
	})
}
