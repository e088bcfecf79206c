package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestServeHelpAndUsage(t *testing.T) {
	if code, usage, _ := runCmd(t, "serve", "--help"); code != cli.ExitOK || !strings.Contains(usage, "Usage: k3 serve --model DIR") {
		t.Errorf("k3 serve --help: exit %d, %q", code, usage)
	}
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--model", "x", "--budget", "lots"},
		{"serve", "--model", "x", "--budget", "8GB", "--preset", "laptop"},
		{"serve", "--model", "x", "--sessions", "0"},
		{"serve", "--model", "x", "--log-format", "xml"},
		{"serve", "--model", "x", "--max-body", "0"},
	} {
		if code, _, stderr := runCmd(t, args...); code != cli.ExitUsage || stderr == "" {
			t.Errorf("%q: exit %d, %q; want %d and a message", args, code, stderr, cli.ExitUsage)
		}
	}
	if code, out, _ := runCmd(t, "help"); code != cli.ExitOK || !strings.Contains(out, "serve") {
		t.Errorf("k3 help lacks serve: %q", out)
	}
}

// TestServeChild is the k3 serve process of TestServeSIGTERM.
func TestServeChild(t *testing.T) {
	args := os.Getenv("K3_SERVE_CHILD")
	if args == "" {
		t.Skip("run by TestServeSIGTERM")
	}
	os.Exit(run(strings.Split(args, "\x1f"), os.Stdin, os.Stdout, os.Stderr))
}

// serveChild starts "k3 serve" in a subprocess and returns its address.
func serveChild(t *testing.T, args ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$")
	cmd.Env = append(os.Environ(), "K3_SERVE_CHILD="+strings.Join(append([]string{"serve"}, args...), "\x1f"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Wait()
		t.Fatalf("k3 serve: %v; stderr:\n%s", err, stderr.String())
	}
	_, url, ok := strings.Cut(strings.TrimSpace(line), " on ")
	if !ok {
		t.Fatalf("k3 serve printed %q", line)
	}
	go io.Copy(io.Discard, stdout)
	return cmd, strings.TrimSuffix(url, "/v1"), &stderr
}

// streamUntilSignal starts a long streamed completion, sends SIGTERM once
// it streams, and returns the rest of the stream.
func streamUntilSignal(t *testing.T, cmd *exec.Cmd, url string, maxTokens int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := fmt.Sprintf(`{"prompt":"Tell a long story","max_tokens":%d,"temperature":0,"stream":true,"ignore_eos":true}`, maxTokens)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	return string(rest)
}

// TestServeSIGTERM: SIGTERM lets a running stream finish and exits 0;
// with a short --shutdown-timeout the stream is cut off with an error
// event instead, and the exit is still 0.
func TestServeSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts k3 serve twice")
	}
	dir := testmodel.Dir(t)
	cmd, url, stderr := serveChild(t, "--model", dir, "--addr", "127.0.0.1:0", "--shutdown-timeout", "1m")
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()
	rest := streamUntilSignal(t, cmd, url, 300)
	if !strings.Contains(rest, `"finish_reason":"length"`) || !strings.HasSuffix(strings.TrimSpace(rest), "data: [DONE]") {
		t.Errorf("the stream running at SIGTERM did not finish: ...%s", rest[max(0, len(rest)-300):])
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("k3 serve after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "shutting down") || !strings.Contains(stderr.String(), "msg=request") {
		t.Errorf("stderr lacks the shutdown and access-log lines:\n%s", stderr.String())
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Error("the server still accepts connections after exiting")
	}

	cmd, url, stderr = serveChild(t, "--model", dir, "--addr", "127.0.0.1:0", "--shutdown-timeout", "50ms", "--log-format", "json")
	rest = streamUntilSignal(t, cmd, url, 4000)
	if !strings.Contains(rest, "shutting down") || strings.Contains(rest, `"finish_reason":"length"`) {
		t.Errorf("a stream past the shutdown timeout was not cut off with an error: ...%s", rest[max(0, len(rest)-300):])
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("k3 serve after SIGTERM and a timeout: %v; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"request"`) {
		t.Errorf("no JSON access log:\n%s", stderr.String())
	}
}
