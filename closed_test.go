package k3_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/k3go/k3"
)

// TestSessionClosed: after Close every method of a session fails with
// ErrClosed, Close again and Reset do nothing, and the budget place it
// held is free for another session.
func TestSessionClosed(t *testing.T) {
	ctx := context.Background()
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 64, RAMBudget: 56e6, Sessions: 1})
	s := m.NewSession()
	if _, err := s.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := s.Save(&state); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	s.Reset()
	if s.Len() != 0 {
		t.Errorf("closed session holds %d tokens", s.Len())
	}
	path := filepath.Join(t.TempDir(), "s.k3s")
	_, stepErr := s.Step(ctx, exp.PromptIDs)
	_, logitsErr := s.Logits(ctx, exp.PromptIDs)
	var genErr error
	for _, err := range s.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 2}) {
		genErr = err
	}
	_, forkErr := s.Fork()
	for name, err := range map[string]error{
		"Step": stepErr, "Logits": logitsErr, "Generate": genErr, "Fork": forkErr,
		"Save":     s.Save(&bytes.Buffer{}),
		"SaveFile": s.SaveFile(path),
		"Load":     s.Load(bytes.NewReader(state.Bytes())),
		"LoadFile": s.LoadFile(path),
	} {
		if !errors.Is(err, k3.ErrClosed) {
			t.Errorf("%s on a closed session: %v, want ErrClosed", name, err)
		}
	}
	// The one place the budget reserves is free again.
	o := m.NewSession()
	defer o.Close()
	if err := o.Load(bytes.NewReader(state.Bytes())); err != nil {
		t.Fatalf("another session after Close: %v", err)
	}
	if o.Len() != len(exp.PromptIDs) {
		t.Errorf("restored %d tokens, want %d", o.Len(), len(exp.PromptIDs))
	}
}
