package plan

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/synth"
)

// BenchmarkPlanReleased times k3 plan on the released layout: the
// README's one-budget question (--budget 8GB --batch 1) and the default
// table (three budgets, four batch sizes, three prompt lengths). It reads
// headers only; run it under the shared lock:
//
//	flock /work/.benchlock go test ./internal/app/plan -run '^$' -bench PlanReleased -benchtime 3x
func BenchmarkPlanReleased(b *testing.B) {
	// A header-only checkpoint of the released layout (k3 synth --profile
	// full --sparse: 96 shards, 1.56 TB apparent, ~130 MB on disk).
	dir := filepath.Join(b.TempDir(), "full")
	if _, err := synth.WriteSparse(dir, synth.Full(), 0); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"budget=8GB,batch=1", []string{"--budget", "8GB", "--batch", "1"}},
		{"defaults", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			args := append([]string{"--model", dir}, c.args...)
			for b.Loop() {
				if err := Run(args, strings.NewReader(""), io.Discard, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
