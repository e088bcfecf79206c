// Server shows how to embed k3's OpenAI-compatible server
// (internal/app/server, what "k3 serve" runs) in a program of your own: open
// a model, build the server, serve its handler, shut down gracefully.
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
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/server"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// --help printed the usage: not a failure.
	case err != nil:
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
	dir := fs.String("model", "", "checkpoint `directory` (default: the quickstart checkpoint)")
	sessions := fs.Int("sessions", 4, "sequences that generate at once, their steps sharing passes over the weights")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		var err error
		if *dir, err = testmodel.Cached(ctx, stderr); err != nil {
			return err
		}
	}
	m, err := k3.OpenContext(ctx, *dir, k3.Options{Sessions: *sessions})
	if err != nil {
		return err
	}
	defer m.Close()
	srv, err := server.New(m, server.Options{Name: "k3", Sessions: *sessions, Logger: slog.New(slog.NewTextHandler(stderr, nil))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stderr, "serving %s on http://%s/v1\n", *dir, ln.Addr())
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
	// Let running requests finish for a while, then cut them off.
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return hs.Close()
}
