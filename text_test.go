package k3_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3"
)

// byteTokenizer writes a tokenizer whose 256 ranks are the single bytes,
// so it fits a model with a 256-token vocabulary.
func byteTokenizer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for i := 0; i < 256; i++ {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(i)}), i)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiktoken.model"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"added_tokens_decoder":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTextAndStopStrings(t *testing.T) {
	ctx := context.Background()
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{TokenizerDir: byteTokenizer(t), MaxContext: 128})
	if m.Tokenizer() == nil {
		t.Fatal("no tokenizer loaded")
	}
	var ids []int
	var text strings.Builder
	for tok, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 20}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
		text.WriteString(tok.Text)
	}
	raw := make([]byte, len(ids))
	for i, id := range ids {
		raw[i] = byte(id)
	}
	if text.String() != string(raw) {
		t.Fatalf("streamed text %q differs from the tokens' bytes %q", text.String(), raw)
	}
	// A stop string spanning tokens 5..7 stops the generation there and is
	// not part of the text.
	stop := string(raw[5:8])
	first := strings.Index(string(raw), stop)
	var got strings.Builder
	n := 0
	for tok, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 20, StopStrings: []string{"never-appears", stop}}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		got.WriteString(tok.Text)
	}
	if got.String() != string(raw[:first]) {
		t.Errorf("text with stop string %q: %q, want %q", stop, got.String(), raw[:first])
	}
	if n != first+len(stop) {
		t.Errorf("%d tokens generated, want %d (up to the end of the stop string)", n, first+len(stop))
	}
	// GenerateText gives the same text.
	s, err := m.GenerateText(ctx, string(byteSlice(exp.PromptIDs)), k3.GenerateOptions{MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if s != string(raw) {
		t.Errorf("GenerateText = %q, want %q", s, raw)
	}
	// Stop strings without a tokenizer are refused.
	plain, _ := openOracle(t, "tiny-mxfp4", k3.Options{})
	for _, err := range plain.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{StopStrings: []string{"x"}}) {
		if err == nil {
			t.Error("stop strings accepted without a tokenizer")
		}
	}
}

func byteSlice(ids []int) []byte {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return b
}

// TestGenerateContinues checks that generated tokens become part of the
// session: a second Generate continues exactly as one long one would.
func TestGenerateContinues(t *testing.T) {
	ctx := context.Background()
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 128})
	np := len(exp.PromptIDs)
	s := m.NewSession()
	var got []int
	for tok, err := range s.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 8}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tok.ID)
	}
	if s.Len() != np+8 {
		t.Fatalf("session holds %d tokens, want %d", s.Len(), np+8)
	}
	// Continue with the next expected token as the prompt.
	next := exp.FullIDs[np+8]
	got = append(got, next)
	for tok, err := range s.Generate(ctx, []int{next}, k3.GenerateOptions{MaxTokens: 5}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tok.ID)
	}
	want := exp.FullIDs[np : np+14]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("continued generation: token %d = %d, want %d (got %v)", i, got[i], want[i], got)
		}
	}
}
