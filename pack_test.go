package k3_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

func TestPackedTrunk(t *testing.T) {
	ctx := context.Background()
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ref, exp := openOracle(t, "tiny-mxfp4", k3.Options{})
	want, err := ref.NewSession().Logits(ctx, exp.FullIDs)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var calls int
	if err := k3.Pack(ctx, dir, out, k3.PackOptions{Progress: func(done, total int64) { calls++ }}); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Error("no progress reported")
	}
	for _, budget := range []int64{0, 55e6, 1e9} {
		m, err := k3.Open(dir, k3.Options{TrunkDir: out, RAMBudget: budget, MaxContext: 64})
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		got, err := m.NewSession().Logits(ctx, exp.FullIDs)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("budget %d: packed trunk logit %d = %v, want %v", budget, i, got[i], want[i])
		}
		m.Close()
	}
	// A second pack into the same place is refused unless forced.
	if err := k3.Pack(ctx, dir, out, k3.PackOptions{}); !errors.Is(err, k3.ErrBadOptions) {
		t.Errorf("repack without Force: %v", err)
	}
	if err := k3.Pack(ctx, dir, out, k3.PackOptions{Force: true}); err != nil {
		t.Errorf("repack with Force: %v", err)
	}
	// Never into the checkpoint.
	if err := k3.Pack(ctx, dir, dir, k3.PackOptions{}); err == nil {
		t.Error("pack into the checkpoint directory accepted")
	}
	// A trunk packed from another checkpoint is refused.
	if _, err := k3.Open(fixtures.Path(t, "oracle/tiny-f32"), k3.Options{TrunkDir: out}); !errors.Is(err, k3.ErrBadCheckpoint) {
		t.Errorf("foreign packed trunk: %v", err)
	}
	// A truncated trunk.bin is refused.
	bin := filepath.Join(out, "trunk.bin")
	st, _ := os.Stat(bin)
	if err := os.Truncate(bin, st.Size()-4096); err != nil {
		t.Fatal(err)
	}
	if _, err := k3.Open(dir, k3.Options{TrunkDir: out}); !errors.Is(err, k3.ErrBadCheckpoint) {
		t.Errorf("truncated trunk.bin: %v", err)
	}
	// No temporary files left behind.
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if e.Name() != "trunk.bin" && e.Name() != "trunk.json" {
			t.Errorf("stray file %s in the output", e.Name())
		}
	}
}
