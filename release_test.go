package k3_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/iox"
)

// TestReleaseLayout runs a tiny checkpoint laid out as the release's files
// are (one layer per shard, safetensors' canonical order, so that each
// layer part is several extents; data sections not on a page; the vision
// tower beside the model): every tensor k3 does not use is ignored, and
// the logits are bit for bit the same with everything resident, with the
// trunk streamed from the shards at the floor, and from a packed trunk.
func TestReleaseLayout(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "tiny-release")
	p := synth.ReleaseLayout(synth.Tiny())
	if _, err := synth.Write(ctx, dir, p, synth.WriteOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The layout this test is about: layer 1's shard starts with its F32
	// vectors, and its attention's tensors are not one run.
	sh := ck.Shards[1]
	if sh.Name != "model-00002-of-000016.safetensors" || sh.Header.DataOff%4096 == 0 || sh.Header.Tensors[0].Stored != "F32" {
		t.Fatalf("shard 2: %s, data at %d, first tensor %+v: not the release's layout", sh.Name, sh.Header.DataOff, sh.Header.Tensors[0])
	}
	var attn []string // layer 1's attention tensors in file order, with what lies between them
	vision := 0
	for _, s := range ck.Shards {
		for _, ti := range s.Header.Tensors {
			if strings.HasPrefix(ti.Name, "vision_tower.") || strings.HasPrefix(ti.Name, "mm_projector.") {
				vision++
			}
		}
	}
	for _, ti := range sh.Header.Tensors {
		attn = append(attn, ti.Name)
	}
	first, last, between := -1, -1, 0
	for i, n := range attn {
		if strings.Contains(n, ".self_attn.") {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	for _, n := range attn[first:last] {
		if !strings.Contains(n, ".self_attn.") {
			between++
		}
	}
	total := ck.Len()
	ck.Close()
	if vision != 168 || between == 0 {
		t.Fatalf("%d vision tensors (want 168); %d other tensors between layer 1's attention tensors (want some)", vision, between)
	}

	ids := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}
	logits := func(opts k3.Options) ([]float32, k3.Stats) {
		t.Helper()
		opts.MaxContext = 64
		m, err := k3.Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		got, err := m.NewSession().Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return got, m.Stats()
	}
	want, _ := logits(k3.Options{})
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	if in.Tensors != total {
		t.Fatalf("inspection counts %d tensors, the shards hold %d", in.Tensors, total)
	}
	trunk := t.TempDir()
	if err := k3.Pack(ctx, dir, trunk, k3.PackOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts k3.Options
	}{
		{"floor, from the shards", k3.Options{RAMBudget: in.FloorBytes}},
		{"floor, packed trunk", k3.Options{RAMBudget: in.FloorBytes, TrunkDir: trunk}},
		{"resident, packed trunk", k3.Options{TrunkDir: trunk}},
	} {
		got, st := logits(c.opts)
		if i := firstBitDiff(got, want); i >= 0 || len(got) != len(want) {
			t.Fatalf("%s: logit %d = %v, want %v", c.name, i, got[i], want[i])
		}
		if c.opts.RAMBudget > 0 && (st.StreamedParts == 0 || st.TrunkBytesRead == 0) {
			t.Fatalf("%s: %d parts streamed, %d trunk bytes read: the trunk did not stream", c.name, st.StreamedParts, st.TrunkBytesRead)
		}
	}
}
