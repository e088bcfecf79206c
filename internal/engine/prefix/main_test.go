package prefix

import (
	"os"
	"testing"
)

// TestMain runs a child process's part of the crash and sharing tests
// when asked to (see crash_test.go), else the tests.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

const childEnv = "K3_PREFIX_CHILD"
