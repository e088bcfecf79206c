package k3_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/engine/trunk"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// A compressed packed trunk gives the same logits, bit for bit, as the
// checkpoint at every budget (everything resident, pinned, streaming).
func TestCompressedTrunk(t *testing.T) {
	ctx := context.Background()
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ref, exp := openOracle(t, "tiny-mxfp4", k3.Options{})
	want, err := ref.NewSession().Logits(ctx, exp.FullIDs)
	if err != nil {
		t.Fatal(err)
	}
	plain, packed := t.TempDir(), t.TempDir()
	if err := k3.Pack(ctx, dir, plain, k3.PackOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k3.Pack(ctx, dir, packed, k3.PackOptions{Compress: true}); err != nil {
		t.Fatal(err)
	}
	x, err := trunk.ReadPackIndex(packed)
	if err != nil {
		t.Fatal(err)
	}
	px, err := trunk.ReadPackIndex(plain)
	if err != nil {
		t.Fatal(err)
	}
	if !x.Compressed || x.Size >= px.Size {
		t.Fatalf("compressed pack: compressed=%v, %d bytes against %d uncompressed", x.Compressed, x.Size, px.Size)
	}
	t.Logf("trunk.bin: %d bytes compressed, %d uncompressed (%.3f)", x.Size, px.Size, float64(x.Size)/float64(px.Size))
	streamed := false
	for _, budget := range append(append([]int64{0}, streamingBudgets(t, dir, packed)...), 1e9) {
		m, err := k3.Open(dir, k3.Options{TrunkDir: packed, TrunkCompression: k3.CompressionOn, RAMBudget: budget, MaxContext: 64})
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		got, err := m.NewSession().Logits(ctx, exp.FullIDs)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("budget %d: compressed trunk logit %d = %v, want %v", budget, i, got[i], want[i])
		}
		st := m.Stats()
		if st.TrunkDecodedBytes > 0 {
			streamed = true
		}
		m.Close()
	}
	if !streamed {
		t.Error("no budget streamed (and decoded) a compressed part: the test does not cover the ring")
	}
}

// A corrupted block is refused with ErrBadCheckpoint naming the part,
// whether it is found at Open (resident) or while streaming.
func TestCompressedTrunkCorrupt(t *testing.T) {
	ctx := context.Background()
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	_, exp := openOracle(t, "tiny-mxfp4", k3.Options{})
	out := t.TempDir()
	if err := k3.Pack(ctx, dir, out, k3.PackOptions{Compress: true}); err != nil {
		t.Fatal(err)
	}
	x, err := trunk.ReadPackIndex(out)
	if err != nil {
		t.Fatal(err)
	}
	// Flip one mantissa bit in the middle of the last part's first block:
	// it decodes (the sign+mantissa bytes are stored as they are), only
	// the checksum can see it.
	pk := x.Parts[len(x.Parts)-1]
	bin := filepath.Join(out, trunk.PackedDataFile)
	f, err := os.OpenFile(bin, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := pk.Offset + pk.BlockEnds[0] - 7
	var b [1]byte
	f.ReadAt(b[:], at)
	b[0] ^= 1
	f.WriteAt(b[:], at)
	f.Close()
	name := "layer " + itoa(pk.Layer) + " " + pk.Part
	if _, err := k3.Open(dir, k3.Options{TrunkDir: out, TrunkCompression: k3.CompressionOn}); !errors.Is(err, k3.ErrBadCheckpoint) || !strings.Contains(err.Error(), name) {
		t.Errorf("corrupt block, resident: %v; want ErrBadCheckpoint naming %s", err, name)
	}
	m, err := k3.Open(dir, k3.Options{TrunkDir: out, TrunkCompression: k3.CompressionOn, RAMBudget: streamingBudgets(t, dir, out)[0], MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.NewSession().Logits(ctx, exp.FullIDs); !errors.Is(err, k3.ErrBadCheckpoint) || !strings.Contains(err.Error(), name) {
		t.Errorf("corrupt block, streaming: %v; want ErrBadCheckpoint naming %s", err, name)
	}
	// A block table that does not add up is refused when the index is read.
	js, _ := os.ReadFile(filepath.Join(out, trunk.PackedIndexFile))
	var raw map[string]any
	json.Unmarshal(js, &raw)
	parts := raw["parts"].([]any)
	parts[0].(map[string]any)["stored"] = float64(pk.Stored + 1)
	js, _ = json.Marshal(raw)
	if _, err := trunk.ParsePackIndex(js); !errors.Is(err, trunk.ErrPackMismatch) {
		t.Errorf("bad block table: %v", err)
	}
}

// A trunk packed from another checkpoint with the same config (seed 1 and
// seed 2 of the tiny synthetic profile) is refused.
func TestPackFingerprint(t *testing.T) {
	ctx := context.Background()
	a, b := synthSeeds(t)
	out := t.TempDir()
	if err := k3.Pack(ctx, a, out, k3.PackOptions{}); err != nil {
		t.Fatal(err)
	}
	if m, err := k3.Open(a, k3.Options{TrunkDir: out}); err != nil {
		t.Fatalf("own pack: %v", err)
	} else {
		m.Close()
	}
	_, err := k3.Open(b, k3.Options{TrunkDir: out})
	if !errors.Is(err, k3.ErrBadCheckpoint) || !strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("pack of seed 1 opened with seed 2: %v; want ErrBadCheckpoint about the fingerprint", err)
	}
}

// synthSeeds writes the tiny synthetic profile with seeds 1 and 2: the
// same config, other weights.
func synthSeeds(t *testing.T) (string, string) {
	t.Helper()
	root := t.TempDir()
	var dirs [2]string
	for i := range dirs {
		p := synth.Tiny()
		p.Seed = uint64(i + 1)
		dirs[i] = filepath.Join(root, itoa(i+1))
		if _, err := synth.Write(context.Background(), dirs[i], p, synth.WriteOptions{Buffered: true}); err != nil {
			t.Fatal(err)
		}
	}
	return dirs[0], dirs[1]
}

func itoa(i int) string { return strconv.Itoa(i) }

// A state saved with one checkpoint is refused by another of the same
// config (seed 1 and seed 2), and accepted by its own.
func TestStateFingerprint(t *testing.T) {
	ctx := context.Background()
	a, b := synthSeeds(t)
	ma, err := k3.Open(a, k3.Options{MaxContext: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	mb, err := k3.Open(b, k3.Options{MaxContext: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	s := ma.NewSession()
	if _, err := s.Logits(ctx, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if err := ma.NewSession().Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Errorf("own state: %v", err)
	}
	err = mb.NewSession().Load(bytes.NewReader(buf.Bytes()))
	if !errors.Is(err, k3.ErrBadState) || !strings.Contains(err.Error(), "another checkpoint") {
		t.Errorf("seed 1 state loaded into seed 2: %v; want ErrBadState naming another checkpoint", err)
	}
}

// The engine decides per run in CompressionAuto and logs its choice; off
// bypasses the compressed pack. Either way the logits are the same.
func TestCompressionModes(t *testing.T) {
	ctx := context.Background()
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	ref, exp := openOracle(t, "tiny-mxfp4", k3.Options{})
	want, err := ref.NewSession().Logits(ctx, exp.FullIDs)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := k3.Pack(ctx, dir, out, k3.PackOptions{Compress: true}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []k3.Compression{k3.CompressionAuto, k3.CompressionOff} {
		var logs bytes.Buffer
		m, err := k3.Open(dir, k3.Options{TrunkDir: out, TrunkCompression: mode, RAMBudget: streamingBudgets(t, dir, out)[0], MaxContext: 64,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("mode %d: %v", mode, err)
		}
		got, err := m.NewSession().Logits(ctx, exp.FullIDs)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("mode %d: logit %d = %v, want %v", mode, i, got[i], want[i])
		}
		decoded := m.Stats().TrunkDecodedBytes > 0
		m.Close()
		chosen := strings.Contains(logs.String(), "compressed pack chosen")
		bypassed := strings.Contains(logs.String(), "compressed pack not used")
		if chosen == bypassed {
			t.Errorf("mode %d: the log does not say what was chosen:\n%s", mode, logs.String())
		}
		if chosen != decoded {
			t.Errorf("mode %d: log says chosen=%v, decoded bytes %v", mode, chosen, decoded)
		}
		if mode == k3.CompressionOff && !bypassed {
			t.Errorf("CompressionOff used the compressed pack")
		}
	}
	if _, err := k3.Open(dir, k3.Options{TrunkDir: out, TrunkCompression: 7}); !errors.Is(err, k3.ErrBadOptions) {
		t.Errorf("TrunkCompression 7: %v", err)
	}
}

// A compressed pack of another checkpoint is refused even with
// TrunkCompression off, when it would not be read.
func TestCompressedPackFingerprint(t *testing.T) {
	ctx := context.Background()
	a, b := synthSeeds(t)
	out := t.TempDir()
	if err := k3.Pack(ctx, a, out, k3.PackOptions{Compress: true}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []k3.Compression{k3.CompressionOn, k3.CompressionOff, k3.CompressionAuto} {
		if _, err := k3.Open(b, k3.Options{TrunkDir: out, TrunkCompression: mode}); !errors.Is(err, k3.ErrBadCheckpoint) || !strings.Contains(err.Error(), "fingerprint") {
			t.Errorf("mode %d: compressed pack of seed 1 opened with seed 2: %v", mode, err)
		}
	}
}

// streamingBudgets returns budgets from the floor to just under everything
// resident for the checkpoint in dir with the packed trunk in trunk (64
// positions), so each streams some of the trunk: budgets derived from the
// plan rather than fixed numbers, which move whenever the plan counts more
// of the process.
func streamingBudgets(t *testing.T, dir, trunk string) []int64 {
	t.Helper()
	in, err := k3.Inspect(dir, k3.Options{TrunkDir: trunk, MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := in.FloorBytes, in.FullBytes
	if hi <= lo {
		t.Fatalf("floor %d, full %d: no budget streams", lo, hi)
	}
	return []int64{lo, lo + (hi-lo)/3, lo + 2*(hi-lo)/3}
}
