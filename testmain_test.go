package k3_test

import (
	"testing"

	"github.com/k3go/k3/internal/testmodel"
)

// TestMain removes the quickstart checkpoint that tests and examples share
// (testmodel.Dir) once they have run.
func TestMain(m *testing.M) { testmodel.Main(m) }
