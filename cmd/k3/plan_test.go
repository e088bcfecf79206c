package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanProjection writes a sparse checkpoint of real widths (headers
// only) and checks k3 plan: batching lowers the bytes per token, the
// uniform union follows its formula, a budget too small for the sessions
// says so, and a trace in which every token picks the same experts gives a
// union of exactly top-k.
func TestPlanProjection(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sparse")
	if code, _, stderr := runCmd(t, "synth", "--out", dir, "--profile", "custom", "--base", "medium", "--layers", "8", "--experts", "128", "--sparse"); code != 0 {
		t.Fatalf("synth --sparse: exit %d: %s", code, stderr)
	}
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
	code, out, stderr := runCmd(t, "plan", "--model", dir, "--budget", "4GB,100MB", "--batch", "1,4,16", "--json")
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
	code, out, stderr = runCmd(t, "plan", "--model", dir, "--budget", "4GB", "--batch", "1,4", "--trace", trace, "--json")
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
