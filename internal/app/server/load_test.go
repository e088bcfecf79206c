package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoad32Streams: 32 concurrent streaming clients all finish, each
// with exactly the output of the same request alone, their steps sharing
// passes.
func TestLoad32Streams(t *testing.T) {
	_, ts, _, m := newClient(t, Options{Sessions: 8, Queue: 32}, nil)
	bodies := make([]string, 32)
	for i := range bodies {
		if i%2 == 0 {
			bodies[i] = fmt.Sprintf(`{"prompt":"Client %d asks about item %d","max_tokens":12,"temperature":0.8,"seed":%d,"stream":true,"ignore_eos":true}`, i, i*7, i)
		} else {
			bodies[i] = fmt.Sprintf(`{"messages":[{"role":"user","content":"Client %d"}],"max_tokens":12,"temperature":0.8,"seed":%d,"stream":true,"thinking":{"type":"disabled"}}`, i, i)
		}
	}
	path := func(i int) string { return []string{"/v1/completions", "/v1/chat/completions"}[i%2] }
	alone := make([]string, len(bodies))
	for i, b := range bodies {
		alone[i], _, _ = complete(t, ts, path(i), b)
	}
	before := m.Stats()
	got := make([]string, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() { got[i], _, _ = complete(t, ts, path(i), b) })
	}
	wg.Wait()
	d := m.Stats().Sub(before)
	for i := range bodies {
		if got[i] != alone[i] {
			t.Errorf("client %d: %q concurrently, %q alone", i, got[i], alone[i])
		}
	}
	if d.Rows < 2*d.Passes {
		t.Errorf("%d rows in %d passes: the 32 clients hardly shared passes", d.Rows, d.Passes)
	}
	t.Logf("32 clients: %d passes, %.1f rows per pass", d.Passes, float64(d.Rows)/float64(d.Passes))
}

// TestQueueFull: beyond Sessions running and Queue waiting, a request
// gets 429 with Retry-After, before its body is read; the others finish.
func TestQueueFull(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	_, ts, s, _ := newClient(t, Options{Sessions: 1, Queue: 1}, func(s *Server) {
		s.afterToken = func() { <-gate }
	})
	defer once.Do(func() { close(gate) })
	body := `{"prompt":"Wait for me","max_tokens":3,"temperature":0,"ignore_eos":true}`
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.lim.mu.Lock()
		n := s.lim.admitted
		s.lim.mu.Unlock()
		if n == 2 && s.Active() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d admitted, %d active; want 2 and 1", n, s.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, b := post(t, ts, "/v1/completions", body)
	c := parse(t, b)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || c.Error == nil || c.Error.Code == nil || *c.Error.Code != "queue_full" {
		t.Fatalf("third request: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	// Other endpoints still answer.
	if code, _, _ := get(t, ts.URL+"/health"); code != 200 {
		t.Errorf("/health with a full queue: %d", code)
	}
	once.Do(func() { close(gate) })
	for range 2 {
		if code := <-codes; code != 200 {
			t.Errorf("a queued request ended with %d", code)
		}
	}
	if _, _, body := get(t, ts.URL+"/metrics"); !strings.Contains(body, "k3_requests_rejected_total 1") ||
		!strings.Contains(body, `k3_requests_total{endpoint="/v1/completions",status="429"} 1`) {
		t.Errorf("/metrics does not count the 429")
	}
}

// TestManyLargeBodies: 50 concurrent 8 MB bodies are read and decoded at
// most Decoders at a time, each refused (too long for the context) before
// it is tokenized, and the heap stays far below 50 bodies' worth.
func TestManyLargeBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 50 bodies of 8 MB")
	}
	var cur, peak atomic.Int64
	_, ts, _, _ := newClient(t, Options{Decoders: 2, Queue: 64, MaxBodyBytes: 9 << 20}, func(s *Server) {
		s.inDecode = func(d int) {
			n := cur.Add(int64(d))
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
		}
	})
	body := []byte(`{"prompt":"` + strings.Repeat("lorem ipsum ", 8<<20/12) + `","max_tokens":4}`)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var heapPeak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > heapPeak.Load() {
				heapPeak.Store(ms.HeapAlloc)
			}
		}
	}()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 50 {
		wg.Go(func() {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				bad.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(b), "context_length_exceeded") {
				bad.Add(1)
				t.Logf("%d %s", resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	if bad.Load() != 0 {
		t.Errorf("%d of 50 requests did not get 400 context_length_exceeded", bad.Load())
	}
	if p := peak.Load(); p < 1 || p > 2 {
		t.Errorf("%d bodies decoded at once, want at most Decoders = 2", p)
	}
	grew := int64(heapPeak.Load()) - int64(base)
	t.Logf("heap grew by at most %d MB with 50 concurrent 8 MB bodies", grew>>20)
	if grew > 300<<20 {
		t.Errorf("the heap grew by %d MB: bodies are not bounded (50 of them, decoded, are over 1 GB)", grew>>20)
	}
}

// TestTrickledBody: a body that trickles in is cut off after BodyTimeout
// with 408, and its decode place is freed.
func TestTrickledBody(t *testing.T) {
	_, ts, _, _ := newClient(t, Options{Decoders: 1, BodyTimeout: 200 * time.Millisecond}, nil)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	start := time.Now()
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		done <- line
	}()
	for {
		select {
		case line := <-done:
			if !strings.Contains(line, "408") || time.Since(start) > 5*time.Second {
				t.Fatalf("after %v: %q, want a 408 status line", time.Since(start), line)
			}
			// The one decode place is free again.
			resp, b := post(t, ts, "/v1/completions", `{"prompt":"x","max_tokens":1}`)
			if resp.StatusCode != 200 {
				t.Fatalf("next request: %d %s", resp.StatusCode, b)
			}
			return
		case <-time.After(50 * time.Millisecond):
			conn.Write([]byte(" ")) // one byte at a time
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the trickled body still holds the connection after 10 s")
		}
	}
}

// TestRequestDeadline: a request that runs past RequestTimeout ends with
// 504 (or, streamed, an error event), and its generation stops.
func TestRequestDeadline(t *testing.T) {
	_, ts, s, _ := newClient(t, Options{RequestTimeout: 150 * time.Millisecond}, func(s *Server) {
		s.afterToken = func() { time.Sleep(5 * time.Millisecond) }
	})
	resp, b := post(t, ts, "/v1/completions", `{"prompt":"Go on","max_tokens":3000,"temperature":0,"ignore_eos":true}`)
	c := parse(t, b)
	if resp.StatusCode != 504 || c.Error == nil || c.Error.Code == nil || *c.Error.Code != "request_timeout" {
		t.Fatalf("past the deadline: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Go on"}],"max_tokens":3000,"stream":true,"ignore_eos":true}`)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "per-request deadline") || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("streamed past the deadline: %d ...%s", resp.StatusCode, b[max(0, len(b)-300):])
	}
	if s.Active() != 0 || s.Cancelled() != 2 {
		t.Errorf("%d active, %d cancelled; want 0 and 2", s.Active(), s.Cancelled())
	}
}
