package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// batchResults reads a k3 batch output into comparable lines: sorted, with
// the response body's "id" and "created" removed (a server sets those per
// request; everything else must be equal across runs).
func batchResults(t *testing.T, paths ...string) []string {
	t.Helper()
	var ls []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("%s ends with a torn line", p)
		}
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("%s: %v: %q", p, err, l)
			}
			if resp, ok := v["response"].(map[string]any); ok {
				if body, ok := resp["body"].(map[string]any); ok {
					delete(body, "id")
					delete(body, "created")
				}
			}
			n, _ := json.Marshal(v)
			ls = append(ls, string(n))
		}
	}
	slices.Sort(ls)
	return ls
}

// TestBatchQuickstart: k3 batch on the quickstart checkpoint: every
// request answered once; the shards together and a run resumed from a
// killed one's output (whole lines and a torn one) equal the plain run.
func TestBatchQuickstart(t *testing.T) {
	dir := testmodel.Dir(t)
	tmp := t.TempDir()
	var in strings.Builder
	const n = 10
	for i := range n {
		fmt.Fprintf(&in, `{"custom_id":"r%d","method":"POST","url":"/v1/completions","body":{"prompt":[%d,%d,%d],"max_tokens":%d,"temperature":0}}`+"\n",
			i, 10+i, 20+2*i, 30+3*i, 2+i%3)
	}
	in.WriteString(`{"custom_id":"s","method":"POST","url":"/v1/completions","body":{"prompt":[1,2],"max_tokens":2,"stream":true}}` + "\n")
	in.WriteString("{oops\n")
	input := filepath.Join(tmp, "in.jsonl")
	os.WriteFile(input, []byte(in.String()), 0o644)
	batch := func(out string, extra ...string) string {
		t.Helper()
		args := append([]string{"batch", "--model", dir, "--input", input, "--output", out, "--sessions", "3", "--progress-every", "10ms"}, extra...)
		code, stdout, stderr := runCmd(t, args...)
		if code != 0 || stdout != "" {
			t.Fatalf("k3 %s: exit %d, stdout %q: %s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stderr
	}

	all := filepath.Join(tmp, "all.jsonl")
	stderr := batch(all)
	if !strings.Contains(stderr, "12 of 12 requests done (12 this run, 2 failed, 0 from before)") || !strings.Contains(stderr, "batch 12/12 (100.0%)") {
		t.Errorf("summary and progress: %s", stderr)
	}
	want := batchResults(t, all)
	ok := 0
	for _, l := range want {
		var r struct {
			CustomID *string `json:"custom_id"`
			Response *struct {
				StatusCode int `json:"status_code"`
				Body       struct {
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				} `json:"body"`
			} `json:"response"`
			Error *struct{ Code string } `json:"error"`
		}
		json.Unmarshal([]byte(l), &r)
		switch {
		case r.CustomID == nil || *r.CustomID == "s":
			if r.Error == nil {
				t.Errorf("want an error line: %s", l)
			}
		case r.Response == nil || r.Response.StatusCode != 200 || r.Response.Body.Usage.CompletionTokens < 1:
			t.Errorf("want a completion: %s", l)
		default:
			ok++
		}
	}
	if ok != n {
		t.Errorf("%d completions, want %d", ok, n)
	}

	s0, s1 := filepath.Join(tmp, "s0.jsonl"), filepath.Join(tmp, "s1.jsonl")
	batch(s0, "--shard", "0/2")
	batch(s1, "--shard", "1/2", "--concurrency", "1")
	if got := batchResults(t, s0, s1); !slices.Equal(got, want) {
		t.Errorf("shards 0/2 and 1/2 together:\n%s\nunsharded:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// What a kill leaves: some whole lines, then half of one.
	b, _ := os.ReadFile(all)
	lines := strings.SplitAfter(string(b), "\n")
	killed := filepath.Join(tmp, "killed.jsonl")
	os.WriteFile(killed, []byte(strings.Join(lines[:5], "")+lines[5][:len(lines[5])/2]), 0o644)
	stderr = batch(killed)
	if !strings.Contains(stderr, "dropped a torn last line") || !strings.Contains(stderr, "(7 this run, ") {
		t.Errorf("resume: %s", stderr)
	}
	if got := batchResults(t, killed); !slices.Equal(got, want) {
		t.Errorf("resumed:\n%s\nuninterrupted:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBatchUsage: --help exits 0; bad flags and inputs exit 2 with a
// message; the command is in the help.
func TestBatchUsage(t *testing.T) {
	code, usage, _ := runCmd(t, "batch", "--help")
	if code != 0 || !strings.Contains(usage, "-shard i/N") || !strings.Contains(usage, "-concurrency") {
		t.Errorf("batch --help: exit %d: %s", code, usage)
	}
	if _, out, _ := runCmd(t, "help"); !strings.Contains(out, "batch") {
		t.Errorf("help does not list batch: %s", out)
	}
	tmp := t.TempDir()
	input := filepath.Join(tmp, "in.jsonl")
	os.WriteFile(input, []byte(`{"custom_id":"a","method":"POST","url":"/v1/completions","body":{}}`+"\n"+
		`{"custom_id":"a","method":"POST","url":"/v1/completions","body":{}}`+"\n"), 0o644)
	out := filepath.Join(tmp, "out.jsonl")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--input", input, "--output", out, "--shard", "2/2"}, "--shard"},
		{[]string{"--input", input, "--output", out, "--shard", "x"}, "--shard"},
		{[]string{"--input", input}, "--output"},
		{[]string{"--input", input, "--output", out, "--sessions", "0"}, "--sessions"},
		{[]string{"--input", input, "--output", out, "--model", testmodel.Dir(t)}, "custom_id"},
	} {
		code, _, stderr := runCmd(t, append([]string{"batch"}, c.args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("batch %v: exit %d: %s; want exit %d naming %s", c.args, code, stderr, cli.ExitUsage, c.want)
		}
	}
}

// TestBatchManifest: the Kubernetes Indexed Job in docs/k8s runs k3 batch
// with flags that parse, one shard per completion index, and a results
// file per index. (Its Kubernetes side: TestK8sManifests.)
func TestBatchManifest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "k8s", "k3-batch-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	completions := 0
	inArgs := false
	for _, l := range strings.Split(string(b), "\n") {
		l, _, _ = strings.Cut(l, " #")
		f := strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(f, "completions:"); ok {
			fmt.Sscan(v, &completions)
		}
		switch {
		case f == "args:":
			inArgs = true
		case inArgs && strings.HasPrefix(f, "- "):
			args = append(args, strings.TrimPrefix(f, "- "))
		default:
			inArgs = false
		}
	}
	if completions < 1 || len(args) == 0 {
		t.Fatalf("no completions (%d) or args (%q) in the manifest", completions, args)
	}
	outputs := make(map[string]bool)
	// The paths the pod mounts are not on this machine: the flags are
	// checked with paths that exist in their place.
	model, input := t.TempDir(), filepath.Join(t.TempDir(), "requests.jsonl")
	os.WriteFile(input, nil, 0o644)
	for i := range completions {
		var a []string
		for _, x := range args {
			x = strings.ReplaceAll(x, "$(JOB_COMPLETION_INDEX)", fmt.Sprint(i))
			if v, ok := strings.CutPrefix(x, "--model="); ok && v != "" {
				x = "--model=" + model
			}
			if v, ok := strings.CutPrefix(x, "--input="); ok && v != "" {
				x = "--input=" + input
			}
			a = append(a, x)
		}
		c, err := parseBatch(a, io.Discard)
		if err != nil {
			t.Fatalf("index %d: k3 batch %q: %v", i, a, err)
		}
		if c.shard != i || c.shards != completions || c.mf.Dir == "" {
			t.Errorf("index %d runs shard %d/%d of model %q; want %d/%d", i, c.shard, c.shards, c.mf.Dir, i, completions)
		}
		if _, err := c.mf.Budget.Bytes(); err != nil {
			t.Errorf("index %d: %v", i, err)
		}
		outputs[c.output] = true
	}
	if len(outputs) != completions {
		t.Errorf("%d indexes share %d results files; each needs its own", completions, len(outputs))
	}
}
