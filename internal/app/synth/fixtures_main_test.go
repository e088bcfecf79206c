package synth

import (
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

// TestMain reports, in one line, the conformance tests skipped for want of
// the shared fixtures.
func TestMain(m *testing.M) { fixtures.Main(m) }
