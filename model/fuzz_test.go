package model

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzParsePackIndex(f *testing.F) {
	f.Add([]byte(`{"format":"k3-trunk","version":1,"align":4096,"size":8192,"parts":[{"layer":0,"part":"attention","offset":0,"bytes":4096},{"layer":0,"part":"ffn","offset":4096,"bytes":4096}]}`))
	f.Add([]byte(`{"format":"k3-trunk","version":1,"align":4096,"size":4096,"parts":[{"offset":4095,"bytes":1}]}`))
	f.Add([]byte(`{"format":"other"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := ParsePackIndex(data)
		if err != nil {
			if !errors.Is(err, ErrPackMismatch) {
				t.Fatalf("error does not wrap ErrPackMismatch: %v", err)
			}
			return
		}
		var end int64
		for _, p := range x.Parts {
			if p.Offset%Align != 0 || p.Offset < end || p.Offset+p.Bytes > x.Size || p.Bytes < 0 {
				t.Fatalf("accepted a misplaced part %+v in a %d-byte file", p, x.Size)
			}
			end = p.Offset + p.Bytes
		}
	})
}

// FuzzStateLoad feeds arbitrary bytes (seeded with a real state file and
// damaged copies) to State.Load: it must fail cleanly or load a state that
// is consistent, and never allocate from a hostile header.
func FuzzStateLoad(f *testing.F) {
	cfg := &Config{}
	raw := []byte(`{"hidden_size":16,"num_hidden_layers":3,"vocab_size":32,"rms_norm_eps":1e-5,"kda_num_heads":2,"kda_head_dim":4,
	"short_conv_kernel_size":3,"gate_lower_bound":-5,"full_attn_layers":[3],"num_attention_heads":2,"q_lora_rank":8,"kv_lora_rank":4,
	"qk_nope_head_dim":4,"qk_rope_head_dim":2,"v_head_dim":4,"num_experts":4,"num_experts_per_token":2,"num_shared_experts":1,
	"routed_expert_hidden_size":8,"moe_intermediate_size":8,"routed_scaling_factor":1,"first_k_dense_replace":1,"intermediate_size":8,
	"attn_res_block_size":2,"situ_beta":4,"situ_linear_beta":25}`)
	cfg, err := ParseConfig(raw)
	if err != nil {
		f.Fatal(err)
	}
	st := NewState(cfg, 8)
	if err := st.reserve(3); err != nil {
		f.Fatal(err)
	}
	st.pos = 3
	var buf bytes.Buffer
	if err := st.Save(&buf, []int{1, 2, 3}, []int{4}); err != nil {
		f.Fatal(err)
	}
	good := buf.Bytes()
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append([]byte{}, good[:20]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewState(cfg, 8)
		tokens, pending, err := s.Load(bytes.NewReader(data), int64(len(data)))
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
