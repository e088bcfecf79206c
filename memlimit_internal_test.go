package k3

import (
	"runtime/debug"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestOpenSetsMemoryLimit checks that a budgeted Open leaves the Go
// runtime's limit at the plan's heap share, under the budget, and that
// Close restores the earlier one.
func TestOpenSetsMemoryLimit(t *testing.T) {
	dir := fixtures.Path(t, "oracle/tiny-mxfp4")
	before := debug.SetMemoryLimit(-1)
	m, err := Open(dir, Options{RAMBudget: 80e6, MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	got, want := debug.SetMemoryLimit(-1), m.e.Memory().HeapLimit()
	heap := m.e.Memory().Heap()
	m.Close()
	if got != want || want < heap || want >= 80e6 {
		t.Fatalf("limit %d while open, want the plan's %d (≥ its heap %d, < the budget)", got, want, heap)
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Fatalf("limit %d after Close, want %d", after, before)
	}
}
