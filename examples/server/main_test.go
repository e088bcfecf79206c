package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestMain(m *testing.M) { testmodel.Main(m) }

// TestExample: the example serves a chat and shuts down when asked.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var log bytes.Buffer
	go func() { done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--model", testmodel.Dir(t)}, &log, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"Hello"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 || c.Choices[0].FinishReason == "" {
		t.Fatalf("chat: %d %+v %v", resp.StatusCode, c, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
