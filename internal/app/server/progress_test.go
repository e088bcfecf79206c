package server

import (
	"bytes"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProgress: a generation that has run longer than the interval gets a
// progress line (its path, prompt prefilled, tokens generated, rate, time
// left) and /metrics reports the generations in flight; once it is done,
// none is.
func TestProgress(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	var clock time.Time
	var metrics string
	s, ts, _ := newTestServer(t, 1, nil)
	s.progress.log = slog.New(slog.NewTextHandler(&logs, nil))
	s.progress.every = time.Minute // no ticking: the test calls logDue itself
	s.progress.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if clock.IsZero() {
			return time.Now()
		}
		return clock
	}
	n := 0
	s.afterToken = func() {
		if n++; n != 4 {
			return
		}
		mu.Lock()
		clock = time.Now().Add(2 * time.Minute)
		mu.Unlock()
		s.progress.logDue()
		_, _, body := get(t, ts.URL+"/metrics")
		metrics = body
	}
	resp, _ := post(t, ts, "/v1/completions", `{"prompt":"The capital of France is","max_tokens":8,"ignore_eos":true,"temperature":0}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	line := logs.String()
	for _, want := range []string{`msg="generation in progress"`, "path=/v1/completions", "phase=decode", "generated=4", "max_tokens=8", "tokens_per_s=", "left_at_most="} {
		if !strings.Contains(line, want) {
			t.Fatalf("progress line %q lacks %s", line, want)
		}
	}
	if m := regexp.MustCompile(`prefill_tokens=(\d+) prefilled=(\d+)`).FindStringSubmatch(line); m == nil || m[1] != m[2] || m[1] == "0" {
		t.Fatalf("progress line %q: want the whole prompt prefilled", line)
	}
	for _, want := range []string{"k3_inflight_generated_tokens 4", `k3_inflight_prefill_tokens{state="total"}`, "k3_inflight_seconds_left"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics during the generation lacks %q", want)
		}
	}
	if old := metricValue(t, metrics, "k3_inflight_oldest_seconds"); old < 100 {
		t.Fatalf("k3_inflight_oldest_seconds %v two minutes into the generation", old)
	}
	if left := metricValue(t, metrics, "k3_inflight_seconds_left"); !(left > 0) {
		t.Fatalf("k3_inflight_seconds_left %v during the generation", left)
	}
	_, _, after := get(t, ts.URL+"/metrics")
	if v := metricValue(t, after, "k3_inflight_generated_tokens"); v != 0 {
		t.Fatalf("k3_inflight_generated_tokens %v once the generation is done", v)
	}
}
