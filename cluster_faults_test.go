package k3_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
)

// tinyCheckpoint writes a tiny synthetic checkpoint with seed into a temp
// directory.
func tinyCheckpoint(t *testing.T, seed uint64) string {
	t.Helper()
	p := synth.Tiny()
	p.Seed = seed
	dir := filepath.Join(t.TempDir(), "ckpt")
	if _, err := synth.Write(context.Background(), dir, p, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// workerProc is a k3 worker process.
type workerProc struct {
	cmd  *exec.Cmd
	addr string
	err  *strings.Builder
}

var listening = regexp.MustCompile(`listening on (\S+)`)

// startWorkerProc runs k3 worker on addr (127.0.0.1:0 for any port) with
// the test cluster key and env, and returns once it listens.
func startWorkerProc(t *testing.T, dir, addr string, env ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(k3Binary(t), "worker", "--model", dir, "--listen", addr, "--threads", "1")
	cmd.Env = append(append(os.Environ(), "K3_CLUSTER_KEY="+string(clusterKey)), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &workerProc{cmd: cmd, err: new(strings.Builder)}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		w.err.WriteString(sc.Text() + "\n")
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			w.addr = m[1]
			go io.Copy(io.Discard, stderr)
			return w
		}
	}
	t.Fatalf("k3 worker exited before listening:\n%s", w.err)
	return nil
}

// soloIDs are the first n tokens one process generates for prompt on
// the checkpoint in dir: what every cluster must give.
func soloIDs(t *testing.T, dir string, prompt []int, n int) []int {
	t.Helper()
	ref, err := k3.Open(dir, k3.Options{MaxContext: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	return generateIDs(t, ref, prompt, k3.GenerateOptions{MaxTokens: n})
}

// openRank0 opens the checkpoint in dir as rank 0 of a cluster whose one
// worker is at addr; it is closed when the test ends.
func openRank0(t *testing.T, dir, addr string, timeout time.Duration) *k3.Model {
	t.Helper()
	m, err := k3.Open(dir, k3.Options{MaxContext: 256, Cluster: &k3.ClusterOptions{Peers: []string{addr}, Key: clusterKey, Timeout: timeout}})
	if err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// generateUntilFault generates from prompt on m, calls fault after the
// after-th token, and returns the tokens generated and the error that
// ended the generation (nil if it ran out of tokens first).
func generateUntilFault(m *k3.Model, prompt []int, after int, fault func()) (int, error) {
	n := 0
	for _, err := range m.Generate(context.Background(), prompt, k3.GenerateOptions{MaxTokens: 200}) {
		if err != nil {
			return n, err
		}
		if n++; n == after {
			fault()
		}
	}
	return n, nil
}

// awaitWhole waits until rank 0 has every worker again; a worker that
// refuses rank 0 fails the test instead of waiting forever.
func awaitWhole(t *testing.T, m *k3.Model) {
	t.Helper()
	for h := m.Cluster().Health; h != nil; h = m.Cluster().Health {
		if strings.Contains(h.Error(), "handshake") {
			t.Fatalf("the worker refused rank 0: %v", h) // would never connect
		}
		time.Sleep(20 * time.Millisecond) // the redial loop's pace; the test's timeout bounds it
	}
}

// TestClusterKillAndRestart kills a worker process (SIGKILL) while rank 0
// generates: the generation fails with an error naming the rank, /health's
// state (Cluster().Health) says it is missing, and once a worker is
// started again on the same address the next generation runs, with the
// tokens of one process.
func TestClusterKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the k3 command and starts worker processes")
	}
	dir := tinyCheckpoint(t, 1)
	prompt := []int{1, 2, 3, 4, 5}
	want := soloIDs(t, dir, prompt, 40)

	w := startWorkerProc(t, dir, "127.0.0.1:0")
	m := openRank0(t, dir, w.addr, 5*time.Second)
	if got := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 40}); !slices.Equal(got, want) {
		t.Fatalf("over 2 ranks %v, one process %v", got, want)
	}
	// Kill the worker after the 5th token.
	n, genErr := generateUntilFault(m, prompt, 5, func() {
		w.cmd.Process.Signal(syscall.SIGKILL)
		w.cmd.Wait()
	})
	if genErr == nil || !strings.Contains(genErr.Error(), "rank 1") {
		t.Fatalf("a generation whose worker was killed: %v after %d tokens", genErr, n)
	}
	if h := m.Cluster().Health; h == nil || !strings.Contains(h.Error(), "rank 1") {
		t.Fatalf("Health with the worker dead: %v", h)
	}
	// A worker back on the same address: the cluster serves again, without
	// a new rank 0.
	startWorkerProc(t, dir, w.addr)
	awaitWhole(t, m)
	if got := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 40}); !slices.Equal(got, want) {
		t.Fatalf("after the restart %v, one process %v", got, want)
	}
}

// TestClusterWorkerStartsLate opens rank 0 before its worker listens: Open
// succeeds, Health names the missing rank and a generation fails naming it
// (never hangs); once the worker is up, the cluster serves one process's
// tokens without a new rank 0.
func TestClusterWorkerStartsLate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the k3 command and starts worker processes")
	}
	dir := tinyCheckpoint(t, 1)
	prompt := []int{4, 5, 6}
	want := soloIDs(t, dir, prompt, 10)
	// An address nothing listens on yet: a port taken and given back.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := openRank0(t, dir, addr, 2*time.Second) // before its worker listens
	if h := m.Cluster().Health; h == nil || !strings.Contains(h.Error(), "rank 1") {
		t.Fatalf("Health with the worker not started: %v", h)
	}
	for _, err := range m.Generate(context.Background(), prompt, k3.GenerateOptions{MaxTokens: 10}) {
		if err == nil || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("a generation without the worker: %v", err)
		}
		break
	}
	startWorkerProc(t, dir, addr)
	awaitWhole(t, m)
	if got := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 10}); !slices.Equal(got, want) {
		t.Fatalf("once the worker is up %v, one process %v", got, want)
	}
}

// TestClusterRefusals starts workers that must be refused at the
// handshake, each for its reason: another checkpoint, another kernel
// choice, another cluster key.
func TestClusterRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the k3 command and starts worker processes")
	}
	dir := tinyCheckpoint(t, 1)
	other := tinyCheckpoint(t, 2)
	for _, c := range []struct {
		name, dir string
		env       []string
		key       []byte
		want      string
	}{
		{"another checkpoint", other, nil, clusterKey, "checkpoint fingerprint differs"},
		{"another kernel choice", dir, []string{"K3_KERNELS=generic"}, clusterKey, "kernels differ"},
		{"a wrong key", dir, nil, []byte("another key of 32 bytes, not it"), "wrong cluster key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != nil && (k3BuildTags == "purego" || os.Getenv("K3_KERNELS") == "generic") {
				t.Skip("rank 0 runs the generic kernels already")
			}
			w := startWorkerProc(t, c.dir, "127.0.0.1:0", c.env...)
			_, err := k3.Open(dir, k3.Options{MaxContext: 64, Cluster: &k3.ClusterOptions{Peers: []string{w.addr}, Key: c.key, Timeout: 5 * time.Second}})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "rank 1") {
				t.Fatalf("want a refusal naming rank 1 and %q, got %v", c.want, err)
			}
		})
	}
	// A worker listens only where it is told.
	w := startWorkerProc(t, dir, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(w.addr)
	if c, err := net.Dial("tcp", net.JoinHostPort("::1", port)); err == nil {
		c.Close()
		t.Fatalf("a worker told to listen on %s answers on [::1]:%s", w.addr, port)
	}
	if _, err := k3.Open(dir, k3.Options{MaxContext: 64, Cluster: &k3.ClusterOptions{Peers: []string{w.addr}}}); !errors.Is(err, k3.ErrBadOptions) {
		t.Fatalf("a cluster without a key: %v, want ErrBadOptions", err)
	}
}
