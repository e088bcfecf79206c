//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
)

// TestHelperProcess runs the command in a child process for the signal
// tests: K3_HELPER_ARGS holds its arguments, separated by newlines.
func TestHelperProcess(t *testing.T) {
	args := os.Getenv("K3_HELPER_ARGS")
	if args == "" {
		t.Skip("run by the signal tests only")
	}
	os.Exit(run(strings.Split(args, "\n"), os.Stdin, os.Stdout, os.Stderr))
}

// startK3 starts `k3 args...` in a child process.
func startK3(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "K3_HELPER_ARGS="+strings.Join(args, "\n"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// waitForPartial waits until a temporary shard in dir has data.
func waitForPartial(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".partial") && fi.Size() > 0 {
				return
			}
		}
	}
	t.Fatal("k3 synth wrote no temporary shard")
}

// TestSynthSignals: SIGTERM during k3 synth removes what it wrote, as
// SIGINT does; after a SIGKILL the temporary files stay, and the next run
// into the same directory removes them and succeeds.
func TestSynthSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a few hundred MB")
	}
	out := filepath.Join(t.TempDir(), "ckpt")
	cmd := startK3(t, "synth", "--out", out, "--profile", "medium", "--buffered")
	waitForPartial(t, out)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitFailure {
		t.Fatalf("after SIGTERM: %v, want exit code %d", err, cli.ExitFailure)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(out)
		t.Fatalf("after SIGTERM the output directory remains (%v, %d entries)", err, len(ents))
	}

	cmd = startK3(t, "synth", "--out", out, "--profile", "medium", "--buffered")
	waitForPartial(t, out)
	cmd.Process.Kill()
	cmd.Wait()
	if code, _, stderr := runCmd(t, "synth", "--out", out, "--profile", "tiny"); code != cli.ExitOK {
		t.Fatalf("after a killed run: exit %d: %s", code, stderr)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("stale %s left", e.Name())
		}
	}
}

// TestPackStaleTemporary: the temporary files of a killed k3 pack never
// block the next run (its lock on the output directory died with it);
// while another pack holds the directory, k3 pack refuses and removes
// nothing.
func TestPackStaleTemporary(t *testing.T) {
	src := fixtures.Path(t, "oracle/tiny-mxfp4")
	out := t.TempDir()
	stale := filepath.Join(out, ".trunk.bin.tmp")
	os.WriteFile(stale, []byte("half a trunk"), 0o644)
	unlock, err := iox.LockDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "pack", "--model", src, "--out", out); code != cli.ExitUsage || !strings.Contains(stderr, "another k3 pack") {
		t.Fatalf("while another pack runs: exit %d (%s), want %d", code, stderr, cli.ExitUsage)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatal("a running pack's temporary file was removed")
	}
	unlock()
	if code, _, stderr := runCmd(t, "pack", "--model", src, "--out", out); code != cli.ExitOK {
		t.Fatalf("after a killed pack: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "trunk.bin")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale temporary file remains: %v", err)
	}
}
