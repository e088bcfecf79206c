package grammartest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

// ReleaseModelDir writes a tiny checkpoint with random weights and the
// release's own tokenizer (163,840 tokens) into a temporary directory of
// tb and returns it. Nothing but a constraint makes such a model's output
// valid JSON, so tests of constrained generation fail when the constraint
// does. Without the fixtures it skips tb (fails it when K3_FIXTURES is
// set).
func ReleaseModelDir(tb testing.TB) string {
	tb.Helper()
	tokDir := fixtures.Path(tb, ReleaseDir)
	p := synth.Tiny()
	p.Config.Vocab = 163840
	dir := filepath.Join(tb.TempDir(), "release-tiny")
	if _, err := synth.Write(context.Background(), dir, p, synth.WriteOptions{TokenizerDir: tokDir, Buffered: true}); err != nil {
		tb.Fatalf("writing the release-vocabulary checkpoint: %v", err)
	}
	return dir
}
