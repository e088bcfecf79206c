package k3_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
	"github.com/k3go/k3/tokenizer"
)

// TestGenerationConfig: generation_config.json beside the tokenizer gives
// the chat's stop tokens (one id or a list); a malformed one is refused at
// Open.
func TestGenerationConfig(t *testing.T) {
	src := testmodel.Dir(t)
	tokDir := t.TempDir()
	for _, f := range []string{tokenizer.ModelFile, tokenizer.ConfigFile} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(tokDir, f), b, 0o644)
	}
	gc := filepath.Join(tokDir, k3.GenerationConfigFile)
	for _, c := range []struct {
		json string
		want []int
	}{
		{`{"eos_token_id": 7}`, []int{7, 506, 505}},
		{`{"eos_token_id": [506, 9]}`, []int{506, 9, 505}},
		{`{"bos_token_id": 1}`, []int{506, 505}},
	} {
		os.WriteFile(gc, []byte(c.json), 0o644)
		m, err := k3.Open(src, k3.Options{TokenizerDir: tokDir})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.StopTokens(); !slices.Equal(got, c.want) {
			t.Errorf("%s: stop tokens %v, want %v", c.json, got, c.want)
		}
		m.Close()
	}
	for _, bad := range []string{`{"eos_token_id": "x"}`, `not json`} {
		os.WriteFile(gc, []byte(bad), 0o644)
		if m, err := k3.Open(src, k3.Options{TokenizerDir: tokDir}); !errors.Is(err, k3.ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", bad, err)
			if m != nil {
				m.Close()
			}
		}
	}
}
