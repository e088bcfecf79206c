//go:build unix

package k3_test

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine/cluster/link"
)

// TestClusterHungWorker stops a worker process (SIGSTOP: it neither
// answers nor closes its connection) while rank 0 generates: the
// generation fails with an error naming the rank once the peer timeout
// passes, never hangs; the worker resumed (SIGCONT) is dialled again and
// the next generation runs with one process's tokens.
func TestClusterHungWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the k3 command and starts worker processes")
	}
	dir := tinyCheckpoint(t, 1)
	prompt := []int{9, 8, 7}
	want := soloIDs(t, dir, prompt, 20)
	w := startWorkerProc(t, dir, "127.0.0.1:0")
	m := openRank0(t, dir, w.addr, time.Second)
	n, genErr := generateUntilFault(m, prompt, 3, func() { w.cmd.Process.Signal(syscall.SIGSTOP) })
	if genErr == nil || !strings.Contains(genErr.Error(), "rank 1") || !errors.Is(genErr, link.ErrTimeout) {
		t.Fatalf("a generation whose worker hung: %v after %d tokens", genErr, n)
	}
	w.cmd.Process.Signal(syscall.SIGCONT)
	awaitWhole(t, m)
	if got := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 20}); !slices.Equal(got, want) {
		t.Fatalf("after the worker resumed %v, one process %v", got, want)
	}
}
