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

// TestContextMustFitTheMachine: with no budget, a context whose KV cache
// the machine cannot hold names MaxContext (and the most that fits, which
// opens), not RAMBudget; AutoContext picks a context the machine holds.
func TestContextMustFitTheMachine(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	machine := func() int64 { return 64 << 20 } // the oracle resident is ~8 MB
	_, err := Open(src, Options{MaxContext: 100_000_000, machineMemory: machine})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Field != "MaxContext" || !errors.Is(err, ErrBudget) || strings.Contains(err.Error(), "RAMBudget") {
		t.Fatalf("got %v, want an *OptionError for MaxContext wrapping ErrBudget", err)
	}
	m, err := Open(src, Options{AutoContext: true, machineMemory: machine})
	if err != nil {
		t.Fatal(err)
	}
	n := m.MaxContext()
	m.Close()
	if n <= 4096 || n >= 100_000_000 {
		t.Errorf("AutoContext on a 64 MB machine: %d positions", n)
	}
	if _, err := Open(src, Options{MaxContext: n + 1, machineMemory: machine}); !errors.As(err, &oe) || oe.Field != "MaxContext" {
		t.Errorf("%d positions, one more than AutoContext's: %v", n+1, err)
	}
	m, err = Open(src, Options{MaxContext: n, machineMemory: machine})
	if err != nil {
		t.Fatalf("AutoContext's %d positions, given: %v", n, err)
	}
	m.Close()
}
