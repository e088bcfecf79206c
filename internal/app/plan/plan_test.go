package plan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/synth"
)

// runCmd runs "k3 plan" with args as the command does: it returns the exit
// code, stdout, and stderr with the error's line.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Run(args[1:], strings.NewReader(""), &out, &errb)
	if err != nil && !errors.Is(err, cli.ErrHelp) {
		fmt.Fprintf(&errb, "k3 plan: %v\n", err)
	}
	return cli.ExitCode(err), out.String(), errb.String()
}

// sparseMedium writes the medium profile's widths with 8 layers and 128
// experts as headers only (k3 synth --profile custom --base medium
// --layers 8 --experts 128 --sparse).
func sparseMedium(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sparse")
	p := synth.Medium()
	p.SetLayers(8)
	p.Config.Experts = 128
	if _, err := synth.WriteSparse(dir, p, 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlanProjection writes a sparse checkpoint of real widths (headers
// only) and checks k3 plan: batching lowers the bytes per token, the
// uniform union follows its formula, a budget too small for the sessions
// says so, and a trace in which every token picks the same experts gives a
// union of exactly top-k.
func TestPlanProjection(t *testing.T) {
	dir := sparseMedium(t)
	var used int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			used += fi.Size()
		}
		return nil
	})
	if used < 10e9 {
		t.Fatalf("the sparse checkpoint describes %d bytes, want the full size", used)
	}
	type row struct {
		Budget        int64     `json:"budget_bytes"`
		Batch         int       `json:"batch"`
		Fits          bool      `json:"fits"`
		Union         float64   `json:"expert_union_per_layer"`
		BytesPerToken int64     `json:"bytes_per_token"`
		SPerToken     []float64 `json:"s_per_token"`
	}
	var rep struct {
		Rows []row `json:"rows"`
	}
	code, out, stderr := runCmd(t, "plan", "--model", dir, "--budget", "4GB,100MB", "--batch", "1,4,16", "--prompts", "0", "--json")
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rep.Rows))
	}
	prev := int64(math.MaxInt64)
	for _, r := range rep.Rows[:3] {
		if !r.Fits {
			t.Fatalf("batch %d does not fit 4 GB", r.Batch)
		}
		want := 128 * (1 - math.Pow(1-16.0/128, float64(r.Batch)))
		if math.Abs(r.Union-want) > 1e-9 {
			t.Fatalf("batch %d: union %v, uniform %v", r.Batch, r.Union, want)
		}
		if r.BytesPerToken >= prev {
			t.Fatalf("batch %d: %d bytes per token, not fewer than the smaller batch's %d", r.Batch, r.BytesPerToken, prev)
		}
		prev = r.BytesPerToken
		if len(r.SPerToken) != 2 || r.SPerToken[0] <= r.SPerToken[1] {
			t.Fatalf("s/token at 6 and 14 GB/s: %v", r.SPerToken)
		}
	}
	for _, r := range rep.Rows[3:] {
		if r.Fits {
			t.Fatalf("batch %d fits 100 MB", r.Batch)
		}
	}
	// A trace of 5 tokens × 7 MoE layers, every token choosing experts 0..15.
	var b []byte
	for tok := 0; tok < 5; tok++ {
		for l := 1; l <= 7; l++ {
			for e := 0; e < 16; e++ {
				b = binary.LittleEndian.AppendUint32(b, uint32(l))
				b = binary.LittleEndian.AppendUint32(b, uint32(e))
			}
		}
	}
	trace := filepath.Join(t.TempDir(), "trace.bin")
	if err := os.WriteFile(trace, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCmd(t, "plan", "--model", dir, "--budget", "4GB", "--batch", "1,4", "--trace", trace, "--prompts", "0", "--json")
	if code != 0 {
		t.Fatalf("plan --trace: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.Union != 16 {
			t.Fatalf("batch %d: union %v on a trace where every token picks the same 16", r.Batch, r.Union)
		}
	}
	// Bad input: a usage error, a broken trace a clear error.
	if code, _, _ := runCmd(t, "plan", "--model", dir, "--batch", "0"); code != 2 {
		t.Fatalf("--batch 0: exit %d, want 2", code)
	}
	os.WriteFile(trace, b[:len(b)-8], 0o644)
	if code, _, stderr := runCmd(t, "plan", "--model", dir, "--trace", trace); code == 0 || !strings.Contains(stderr, "whole tokens") {
		t.Fatalf("a truncated trace: exit %d, %s", code, stderr)
	}
}

// TestPlanPrefill checks the prefill projection: a wide pass of the
// planner's rows reads fewer bytes per prompt token than passes of 64
// rows, longer prompts take more passes, a cached prefix costs less than a
// cold prefill, and a prompt whose state does not fit the budget says so.
func TestPlanPrefill(t *testing.T) {
	dir := sparseMedium(t)
	var rep struct {
		Prefill []prefillRow `json:"prefill"`
	}
	code, out, stderr := runCmd(t, "plan", "--model", dir, "--budget", "6GB,3GB", "--batch", "1", "--prompts", "1000,10000,1000000", "--json")
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Prefill) != 6 {
		t.Fatalf("%d prefill rows, want 6", len(rep.Prefill))
	}
	for _, r := range rep.Prefill {
		if r.PromptTokens == 1000000 {
			if r.Fits {
				t.Fatalf("a million-token prompt fits %d bytes", r.Budget)
			}
			continue
		}
		if !r.Fits || r.Rows < 256 || r.Passes != (r.PromptTokens+r.Rows-1)/r.Rows {
			t.Fatalf("%+v: want at least 256 rows per pass and the passes they take", r)
		}
		if r.ColdBytes >= r.Chunk64Bytes || r.BytesPerPromptToken*int64(r.PromptTokens) > r.ColdBytes {
			t.Fatalf("%+v: wide passes read no less than passes of 64 rows", r)
		}
		// A cached prefix saves passes when the cold prompt takes more of
		// them than its new tail (one pass reads the trunk once however
		// many of its rows are used).
		if tailPasses := (r.CachedTail + r.Rows - 1) / r.Rows; r.Passes > tailPasses && (r.CachedBytes >= r.ColdBytes || len(r.CachedSeconds) != 2 || r.CachedSeconds[0] >= r.ColdSeconds[0]) {
			t.Fatalf("%+v: a cached prefix costs no less than a cold prefill of more passes", r)
		}
	}
	if code, out, _ := runCmd(t, "plan", "--model", dir, "--budget", "6GB", "--batch", "1", "--prompts", "1000"); code != 0 || !strings.Contains(out, "prefill:") {
		t.Fatalf("plan's text: exit %d:\n%s", code, out)
	}
}

// TestPlanRanks checks k3 plan --ranks on a sparse checkpoint of real
// widths: one rank gives exactly the one-process rows, two ranks read
// fewer bytes per rank where one process streams (each rank holds half
// of the rows in the same budget), a pass's time is the slowest rank's
// reads plus its gathers at the network's latency and bandwidth, a budget
// below a rank's floor says so, and bad flags are usage errors.
func TestPlanRanks(t *testing.T) {
	dir := sparseMedium(t)
	var rep struct {
		Rows    []planRow `json:"rows"`
		Cluster struct {
			Projection string       `json:"projection"`
			Latency    float64      `json:"net_latency_seconds"`
			GBps       float64      `json:"net_gbps"`
			Rows       []clusterRow `json:"rows"`
		} `json:"cluster"`
	}
	code, out, stderr := runCmd(t, "plan", "--model", dir, "--budget", "3GB,100MB", "--batch", "1,4", "--gbps", "6,14", "--prompts", "0",
		"--ranks", "1,2", "--net-latency", "20us", "--net-gbps", "12.5", "--json")
	if code != 0 {
		t.Fatalf("plan --ranks: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	cl := rep.Cluster
	if len(cl.Rows) != 8 || cl.Latency != 20e-6 || cl.GBps != 12.5 || !strings.Contains(cl.Projection, "projection") {
		t.Fatalf("%d cluster rows, latency %v, %v GB/s, %q", len(cl.Rows), cl.Latency, cl.GBps, cl.Projection)
	}
	for i, r := range cl.Rows[:4] { // one rank: the one-process rows
		p := rep.Rows[i]
		if r.Ranks != 1 || r.Budget != p.Budget || r.Batch != p.Batch || r.Fits != p.Fits || r.Worker != nil || r.GathersPerPass != 0 ||
			r.Rank0.BytesPerPass != p.BytesPerPass || r.Rank0.ExpertHitRate != p.ExpertHitRate || !slices.Equal(r.SPerToken, p.SPerToken) {
			t.Fatalf("one rank: %+v, want the one-process row %+v", r, p)
		}
	}
	for i, r := range cl.Rows[4:] {
		one := cl.Rows[i]
		if r.Budget < 1e9 {
			if r.Fits || !strings.Contains(r.Why, "RAM budget too small") {
				t.Fatalf("two ranks fit %d bytes: %+v", r.Budget, r)
			}
			continue
		}
		if !r.Fits || r.Worker == nil || r.GathersPerPass == 0 {
			t.Fatalf("two ranks at %d bytes, batch %d: %+v", r.Budget, r.Batch, r)
		}
		if r.Rank0.BytesPerPass >= one.Rank0.BytesPerPass || r.Worker.BytesPerPass >= one.Rank0.BytesPerPass {
			t.Fatalf("batch %d: ranks read %d and %d bytes a pass, one process %d", r.Batch, r.Rank0.BytesPerPass, r.Worker.BytesPerPass, one.Rank0.BytesPerPass)
		}
		perGather := float64(r.SentPerPass+r.ReceivedPerPass) / float64(r.GathersPerPass)
		net := float64(r.GathersPerPass) * (20e-6 + perGather/12.5e9)
		if math.Abs(r.BytesPerGather-perGather) > 1e-6 || math.Abs(r.NetSecondsPerPass-net) > 1e-12 {
			t.Fatalf("batch %d: %v bytes and %v s of network per pass, want %v and %v", r.Batch, r.BytesPerGather, r.NetSecondsPerPass, perGather, net)
		}
		for j, g := range []float64{6, 14} {
			want := float64(max(r.Rank0.BytesPerPass, r.Worker.BytesPerPass))/(g*1e9) + net
			if math.Abs(r.SPerToken[j]-want) > 1e-9 {
				t.Fatalf("batch %d at %g GB/s: %v s a pass, want %v", r.Batch, g, r.SPerToken[j], want)
			}
		}
	}
	code, out, _ = runCmd(t, "plan", "--model", dir, "--budget", "3GB", "--batch", "1", "--prompts", "0", "--ranks", "2")
	if code != 0 || !strings.Contains(out, "cluster (--ranks): a projection") {
		t.Fatalf("plan --ranks text: exit %d:\n%s", code, out)
	}
	for _, bad := range [][]string{{"--ranks", "0"}, {"--ranks", "2,x"}, {"--ranks", "2", "--net-gbps", "0"}, {"--ranks", "2", "--net-latency", "-1us"}} {
		if code, _, _ := runCmd(t, append([]string{"plan", "--model", dir, "--prompts", "0"}, bad...)...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}
}
