// Server is an OpenAI-compatible HTTP server for a k3 model:
// POST /v1/completions and POST /v1/chat/completions, each with and
// without streaming ("stream": true gives server-sent events), and
// GET /v1/models. Concurrent requests each get their own session on the
// shared model; a client that disconnects stops its generation.
//
//	go run ./examples/server --addr 127.0.0.1:8080
//	curl -s localhost:8080/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'
//
// With no --model it serves the quickstart checkpoint (a tiny synthetic
// model with random weights, written once into the user's cache).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testmodel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled. ready, if not nil, receives the
// listening address.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	modelDir := fs.String("model", "", "checkpoint `directory` (default: the quickstart checkpoint)")
	name := fs.String("name", "", "model id in the API (default: the checkpoint directory's name)")
	maxContext := fs.Int("max-context", 4096, "positions per request (prompt and completion)")
	parallel := fs.Int("parallel", 4, "generations that run at once, their steps sharing passes over the weights; more requests wait")
	threads := fs.Int("threads", 0, "kernel threads (0 = GOMAXPROCS)")
	budget := fs.Int64("budget", 0, "RAM budget in bytes (0 = no limit)")
	spec := fs.Int("spec", 0, "speculative decoding: verify up to `N` drafted tokens per pass (0 = off); the text is exactly that of plain decoding")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *maxContext <= 0 || *parallel <= 0 {
		return errors.New("--max-context and --parallel must be positive")
	}
	dir := *modelDir
	if dir == "" {
		var err error
		if dir, err = testmodel.Cached(ctx, stderr); err != nil {
			return err
		}
		if *name == "" {
			*name = "k3-quickstart"
		}
	}
	if *name == "" {
		*name = filepath.Base(filepath.Clean(dir))
	}
	m, err := k3.OpenContext(ctx, dir, k3.Options{MaxContext: *maxContext, Sessions: *parallel, Threads: *threads, RAMBudget: *budget, Speculate: max(*spec, 0)})
	if err != nil {
		return err
	}
	defer m.Close()
	srv, err := NewServer(m, ServerOptions{Name: *name, MaxContext: *maxContext, Parallel: *parallel, Speculate: max(*spec, 0)})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// Requests' contexts derive from base: cancelling it at shutdown stops
	// every generation still streaming.
	base, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	hs := &http.Server{Handler: srv.Handler(), BaseContext: func(net.Listener) context.Context { return base }, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "serving %s (%s) on http://%s/v1\n", *name, dir, ln.Addr())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "shutting down")
	stopAll()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}
