package k3_test

import (
	"os"
	"testing"

	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestMain runs the RSS child process when asked to (TestPeakRSSWithinBudget),
// and otherwise the tests, then removes the checkpoints they shared: the
// quickstart one (testmodel.Dir) and the wide synthetic one.
func TestMain(m *testing.M) {
	if child := os.Getenv("K3_RSS_CHILD"); child != "" {
		os.Exit(rssChild(child))
	}
	testmodel.Main(removeWide{m})
}
