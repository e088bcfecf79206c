//go:build unix

package batchjob

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The crash tests run the job in a child process (this test binary, run
// again with K3_BATCHJOB_CHILD set), kill it with SIGKILL and resume it:
// only a real process death shows what the file holds when nothing in the
// process gets to clean up.

// childMain runs one job with the fake handler, configured from the
// environment, and prints its Summary as JSON.
func childMain() int {
	env := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	o := Options{Input: os.Getenv("K3_BATCHJOB_IN"), Output: os.Getenv("K3_BATCHJOB_OUT"),
		Shard: env("K3_BATCHJOB_SHARD"), Shards: env("K3_BATCHJOB_SHARDS"), Concurrency: env("K3_BATCHJOB_CONC")}
	if tearAt := env("K3_BATCHJOB_TEAR"); tearAt > 0 {
		// Die inside a write: half of line tearAt reaches the file.
		n := 0
		o.writeLine = func(f *os.File, line []byte) bool {
			if n++; n < tearAt {
				return false
			}
			f.Write(line[:len(line)/2])
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			waitForKill()
			return true // not reached
		}
	}
	h := &fakeHandler{delay: time.Duration(env("K3_BATCHJOB_DELAY_US")) * time.Microsecond}
	s, err := Run(context.Background(), h, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(s)
	return 0
}

type child struct {
	in, out             string
	shard, shards, conc int
	delay               time.Duration
	tearAt              int
}

func (c child) cmd(t *testing.T) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "K3_BATCHJOB_CHILD=1", "K3_BATCHJOB_IN="+c.in, "K3_BATCHJOB_OUT="+c.out,
		fmt.Sprintf("K3_BATCHJOB_SHARD=%d", c.shard), fmt.Sprintf("K3_BATCHJOB_SHARDS=%d", c.shards),
		fmt.Sprintf("K3_BATCHJOB_CONC=%d", c.conc), fmt.Sprintf("K3_BATCHJOB_DELAY_US=%d", c.delay.Microseconds()),
		fmt.Sprintf("K3_BATCHJOB_TEAR=%d", c.tearAt))
	return cmd
}

// finish runs the child to the end and returns its summary.
func (c child) finish(t *testing.T) Summary {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := c.cmd(t)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v: %s", err, stderr.String())
	}
	var s Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("child summary %q: %v", stdout.String(), err)
	}
	return s
}

// killAfter starts the child and SIGKILLs it once the output holds at
// least lines newlines; it returns whether the kill came before the child
// ended by itself.
func (c child) killAfter(t *testing.T, lines int) bool {
	t.Helper()
	cmd := c.cmd(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		select {
		case <-exited:
			return false
		case <-time.After(500 * time.Microsecond):
		}
		b, _ := os.ReadFile(c.out)
		if bytes.Count(b, []byte("\n")) >= lines {
			cmd.Process.Signal(syscall.SIGKILL)
			err := <-exited
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			return ok && ws.Signaled() && err != nil
		}
	}
}

// completeLines checks the invariant a kill must keep: whole result lines
// (a torn last one aside), no request twice. It returns the count.
func completeLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := b[:bytes.LastIndexByte(b, '\n')+1]
	tmp := filepath.Join(t.TempDir(), "whole.jsonl")
	os.WriteFile(tmp, whole, 0o644)
	rs := readOutput(t, tmp)
	keysOnce(t, rs)
	return len(rs)
}

// TestKillAndResume: a job SIGKILLed three times at different points, then
// run to the end, wrote every request exactly once, and its lines equal an
// uninterrupted run's.
func TestKillAndResume(t *testing.T) {
	const n = 150
	in := writeInput(t, n, `{"custom_id":`, requestLine("fails", "/v1/completions", `{"fail":true}`))
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.jsonl")
	run(t, &fakeHandler{}, Options{Input: in, Output: ref, Concurrency: 4})

	c := child{in: in, out: filepath.Join(dir, "out.jsonl"), shards: 1, conc: 4, delay: 10 * time.Millisecond}
	kills := 0
	for _, at := range []int{5, 40, 90} {
		if c.killAfter(t, at) {
			kills++
		}
		got := completeLines(t, c.out)
		t.Logf("killed after %d lines: %d whole lines", at, got)
	}
	if kills == 0 {
		t.Fatal("the child always finished before it could be killed")
	}
	s := c.finish(t)
	if s.Skipped+s.Written != n+2 || s.Skipped == 0 {
		t.Errorf("final run: %+v, want %d requests in all, some from before", s, n+2)
	}
	keysOnce(t, readOutput(t, c.out))
	if got, want := sortedLines(t, c.out), sortedLines(t, ref); !slices.Equal(got, want) {
		t.Errorf("after %d kills: %d lines, uninterrupted %d, or they differ", kills, len(got), len(want))
	}
}

// TestTornWrite: a process that dies halfway through writing a line leaves
// a torn last line; the rerun drops exactly it and finishes the job.
func TestTornWrite(t *testing.T) {
	const n = 30
	in := writeInput(t, n)
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.jsonl")
	run(t, &fakeHandler{}, Options{Input: in, Output: ref, Concurrency: 3})

	c := child{in: in, out: filepath.Join(dir, "out.jsonl"), shards: 1, conc: 3, tearAt: 12}
	if err := c.cmd(t).Run(); err == nil {
		t.Fatal("the tearing child was not killed")
	}
	b, _ := os.ReadFile(c.out)
	if bytes.Count(b, []byte("\n")) != 11 || b[len(b)-1] == '\n' {
		t.Fatalf("after the torn write: %d lines, ends %q", bytes.Count(b, []byte("\n")), b[len(b)-10:])
	}
	torn := int64(len(b) - (bytes.LastIndexByte(b, '\n') + 1))
	c.tearAt = 0
	s := c.finish(t)
	if s.Truncated != torn || s.Skipped != 11 || s.Written != n-11 {
		t.Errorf("rerun: %+v, want %d bytes truncated, 11 skipped, %d written", s, torn, n-11)
	}
	if got, want := sortedLines(t, c.out), sortedLines(t, ref); !slices.Equal(got, want) {
		t.Error("after a torn write and a rerun the lines differ from an uninterrupted run")
	}
}

// TestKilledShards: three shards in three processes, one of them killed
// and rerun, together equal the unsharded run.
func TestKilledShards(t *testing.T) {
	const n = 90
	in := writeInput(t, n, "", "not json")
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.jsonl")
	run(t, &fakeHandler{}, Options{Input: in, Output: ref, Concurrency: 4})
	var outs []string
	for i := range 3 {
		c := child{in: in, out: filepath.Join(dir, fmt.Sprintf("shard-%d.jsonl", i)), shard: i, shards: 3, conc: 2, delay: 3 * time.Millisecond}
		if i == 1 {
			c.killAfter(t, 10)
			completeLines(t, c.out)
		}
		s := c.finish(t)
		want := 0
		for l := range n + 2 {
			if l%3 == i && l != n { // line n is blank
				want++
			}
		}
		if s.Selected != want || s.Skipped+s.Written != want {
			t.Errorf("shard %d: %+v, want %d selected and done", i, s, want)
		}
		outs = append(outs, c.out)
	}
	if got, want := sortedLines(t, outs...), sortedLines(t, ref); !slices.Equal(got, want) {
		t.Errorf("shards: %d lines, unsharded %d, or they differ", len(got), len(want))
	}
}

// waitForKill blocks until the process is killed. It sleeps rather than
// selecting on nothing: with every other goroutine parked too (the store's
// write-behind waits on a condition variable), the runtime would call
// `select {}` a deadlock and exit 2 before the kill arrives.
func waitForKill() {
	for {
		time.Sleep(time.Hour)
	}
}
