package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestBatchSIGKILL: the k3 batch process itself, killed with SIGKILL at
// arbitrary moments of a job and rerun with the same --output each time,
// ends with every custom_id exactly once and the same results as an
// uninterrupted run. (internal/app/batchjob's crash tests prove the runner with
// a fake handler; this one runs the real command, model and server.)
func TestBatchSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs k3 batch three times in subprocesses")
	}
	dir := testmodel.Dir(t)
	tmp := t.TempDir()
	var in strings.Builder
	const n = 48
	for i := range n {
		fmt.Fprintf(&in, `{"custom_id":"k%d","method":"POST","url":"/v1/completions","body":{"prompt":[%d,%d],"max_tokens":12,"temperature":0}}`+"\n",
			i, 3+i%50, 7+i%31)
	}
	input := filepath.Join(tmp, "in.jsonl")
	if err := os.WriteFile(input, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(out string) []string {
		return []string{"batch", "--model", dir, "--input", input, "--output", out, "--sessions", "2"}
	}

	want := filepath.Join(tmp, "want.jsonl")
	if code, _, stderr := runCmd(t, args(want)...); code != 0 {
		t.Fatalf("uninterrupted run: exit %d: %s", code, stderr)
	}
	wantLines := batchResults(t, want)
	if len(wantLines) != n {
		t.Fatalf("uninterrupted run wrote %d lines, want %d", len(wantLines), n)
	}

	out := filepath.Join(tmp, "out.jsonl")
	kills := 0
	for _, after := range []int{2, 15, 30} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$")
		cmd.Env = append(os.Environ(), "K3_SERVE_CHILD="+strings.Join(args(out), "\x1f"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Kill once the output holds `after` more lines (a line may be
		// half written at that instant; that is the point).
		killed := false
		deadline := time.Now().Add(60 * time.Second)
	wait:
		for time.Now().Before(deadline) {
			select {
			case <-done:
				break wait
			default:
			}
			if b, _ := os.ReadFile(out); bytes.Count(b, []byte("\n")) >= after {
				cmd.Process.Signal(syscall.SIGKILL)
				<-done
				killed = true
				break
			}
			time.Sleep(time.Millisecond)
		}
		if killed {
			kills++
		}
		// Never a line twice, whatever the moment.
		b, _ := os.ReadFile(out)
		seen := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			i := strings.Index(l, `"custom_id":"`)
			if i < 0 || !strings.HasSuffix(l, "}") {
				continue // empty, or the torn last line
			}
			id := l[i+len(`"custom_id":"`):]
			id = id[:strings.IndexByte(id, '"')]
			if seen[id] {
				t.Fatalf("after a kill at %d lines: %s written twice", after, id)
			}
			seen[id] = true
		}
	}
	if kills == 0 {
		t.Fatal("every child finished before it could be killed: the test proves nothing")
	}
	if code, _, stderr := runCmd(t, args(out)...); code != 0 {
		t.Fatalf("final rerun: exit %d: %s", code, stderr)
	}
	if got := batchResults(t, out); !slices.Equal(got, wantLines) {
		t.Errorf("after %d kills and reruns:\n%s\nuninterrupted:\n%s", kills, strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
	t.Logf("%d SIGKILLs; %d results identical to the uninterrupted run", kills, len(wantLines))
}
