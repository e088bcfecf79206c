package k3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

func TestSaveRestore(t *testing.T) {
	ctx := context.Background()
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 64})
	np := len(exp.PromptIDs)
	// Reference: the whole sequence in one session.
	ref := m.NewSession()
	want, err := ref.Logits(ctx, exp.FullIDs)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config().Vocab
	// Feed the prompt, save, restore into a fresh session, continue.
	s := m.NewSession()
	if _, err := s.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "turn1.k3s")
	if err := s.SaveFile(path); err != nil {
		t.Fatal(err)
	}
	r := m.NewSession()
	if err := r.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	if r.Len() != np {
		t.Fatalf("restored %d tokens, want %d", r.Len(), np)
	}
	for i, id := range exp.FullIDs[np:] {
		got, err := r.Step(ctx, []int{id})
		if err != nil {
			t.Fatal(err)
		}
		row := want[(np+i)*V : (np+i+1)*V]
		for j := range row {
			if math.Float32bits(got[j]) != math.Float32bits(row[j]) {
				t.Fatalf("after restore, position %d logit %d = %v, want %v", np+i, j, got[j], row[j])
			}
		}
	}

	// Corruption, truncation and foreign models are refused; the session
	// stays usable.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"truncated": raw[:len(raw)-9],
		"flipped":   append(append([]byte{}, raw[:len(raw)/2]...), append([]byte{raw[len(raw)/2] ^ 1}, raw[len(raw)/2+1:]...)...),
		"garbage":   []byte("hello, world, this is not a state"),
		"empty":     nil,
	}
	for name, b := range bad {
		if err := r.Load(bytes.NewReader(b)); !errors.Is(err, k3.ErrBadState) {
			t.Errorf("%s: got %v, want ErrBadState", name, err)
		}
		if r.Len() != 0 {
			t.Errorf("%s: session holds %d tokens after a failed load", name, r.Len())
		}
	}
	// Load reads exactly the state its header declares: what follows it
	// in the stream stays unread.
	stream := bytes.NewReader(append(append([]byte{}, raw...), "tail"...))
	if err := r.Load(stream); err != nil {
		t.Fatalf("state followed by more data: %v", err)
	}
	if rest, _ := io.ReadAll(stream); string(rest) != "tail" || r.Len() != np {
		t.Errorf("after Load: %d tokens, %q left in the stream; want %d, \"tail\"", r.Len(), rest, np)
	}
	other, err := k3.Open(fixtures.Path(t, "oracle/tiny-f32"), k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.NewSession().LoadFile(path); err == nil {
		// Both oracles share a config except moe_intermediate_size.
		t.Error("state of another model accepted")
	}
	small, err := k3.Open(fixtures.Path(t, "oracle/tiny-mxfp4"), k3.Options{MaxContext: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := small.NewSession().LoadFile(path); !errors.Is(err, k3.ErrBadState) {
		t.Errorf("state longer than MaxContext: %v", err)
	}
	// Never into the checkpoint directory.
	if err := s.SaveFile(filepath.Join(fixtures.Path(t, "oracle/tiny-mxfp4"), "x.k3s")); err == nil {
		t.Error("saved into the checkpoint directory")
	}
}
