package k3

import (
	"errors"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestResidentMustFitTheMachine: with no budget every weight is resident;
// on a machine too small for that, Open fails with ErrBudget before
// allocating (the allocator would kill the process), and a budget opens it.
func TestResidentMustFitTheMachine(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	small := func() int64 { return 4 << 20 } // smaller than the oracle's ~8 MB resident
	_, err := Open(src, Options{MaxContext: 64, machineMemory: small})
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "RAMBudget") {
		t.Fatalf("got %v, want ErrBudget suggesting a budget", err)
	}
	m, err := Open(src, Options{MaxContext: 64, RAMBudget: 56e6, machineMemory: small})
	if err != nil {
		t.Fatalf("with a budget: %v", err)
	}
	m.Close()
}
