package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/progress"
	"github.com/k3go/k3/internal/app/server"
)

const serveUsage = `--model DIR [--budget SIZE | --preset NAME] [--addr 127.0.0.1:8080] [--max-batch N] [--sessions N] [--queue N] [--api-key KEY] [--cors ORIGIN] [flags]

Serves the model with the OpenAI API (GET /v1/models, /v1/models/{id};
POST /v1/completions, /v1/chat/completions, /v1/responses, with and without
streaming; GET and DELETE /v1/responses/{id}), Anthropic's Messages API
(POST /v1/messages, /v1/messages/count_tokens), Ollama's API (GET /,
/api/version, /api/tags, /api/ps; POST /api/show, /api/chat, /api/generate,
streamed as NDJSON by default), GET /health (503 while loading or
draining), GET /metrics (Prometheus), and POST /tokenize, /detokenize
(llama-server's shapes). Codex CLI, Claude Code and Ollama's clients work
against it: see docs/AGENTS.md. Concurrent requests
share passes over the weights. Beyond --sessions running sequences and
--queue waiting requests, a request gets 429 with Retry-After.

SIGTERM or SIGINT stops accepting connections, lets running requests
finish within --shutdown-timeout, then cancels them, and exits 0.`

// serveOpts are the parsed flags of k3 serve.
type serveOpts struct {
	mf              cli.ModelFlags
	tokenizer       string
	addr, name      string
	maxBatch        int
	sessions, queue int
	apiKey, cors    string
	logFormat       string
	spec            cli.SpecFlag
	shutdown        time.Duration
	request         time.Duration
	body            time.Duration
	maxBody         string
	logBodies       bool
	stored          int
}

func runServe(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("serve", serveUsage, stderr)
	var o serveOpts
	o.mf.PrefixByDefault = true
	o.mf.AutoContext = true
	o.mf.Register(fs)
	fs.StringVar(&o.tokenizer, "tokenizer", "", "`directory` with tiktoken.model and tokenizer_config.json (default: the checkpoint directory)")
	cli.InputDirs(fs, "tokenizer")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen `address` (host:port)")
	fs.StringVar(&o.name, "name", "", "model id in the API (default: the checkpoint directory's name)")
	fs.IntVar(&o.maxBatch, "max-batch", 0, "most token rows one pass over the weights carries, all sequences together (0 = the planner's: sized to the budget)")
	fs.IntVar(&o.sessions, "sessions", 4, "sequences that generate at once (a request with n choices runs n); the budget reserves state for each")
	fs.IntVar(&o.queue, "queue", 0, "requests that wait beyond the running ones before 429 (0 = 4 × --sessions)")
	fs.StringVar(&o.apiKey, "api-key", "", "require \"Authorization: Bearer `KEY`\" (or \"x-api-key: KEY\") on every request but /health (default: none)")
	fs.StringVar(&o.cors, "cors", "", "allow browser requests from `ORIGIN` (\"*\" for any; default: no CORS headers)")
	fs.StringVar(&o.logFormat, "log-format", "text", "access log `format` on stderr: text or json")
	o.spec.Register(fs, k3.SpeculateAuto)
	fs.DurationVar(&o.shutdown, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long running requests may take to finish before they are cancelled")
	fs.DurationVar(&o.request, "request-timeout", 0, "most time one request may take, queueing included (0 = no limit: a request runs while its client is connected; one reply at a small budget can take hours)")
	fs.DurationVar(&o.body, "body-timeout", 30*time.Second, "most time to read a request body once its turn comes")
	fs.StringVar(&o.maxBody, "max-body", "8MiB", "largest request body, e.g. 8MiB")
	fs.BoolVar(&o.logBodies, "log-bodies", false, "log the body of every /v1/responses, /v1/messages and Ollama /api/ request (to see what a client sends)")
	fs.IntVar(&o.stored, "stored-responses", 256, "responses /v1/responses keeps for previous_response_id and GET (the least recently used go first; 0 = none)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	maxBody, err := cli.ParseSize(o.maxBody)
	if err != nil {
		return cli.Usagef("--max-body %s: %v", o.maxBody, err)
	}
	if err := cli.FirstError(
		cli.Positive("max-body", maxBody),
		cli.Positive("sessions", o.sessions),
		cli.NotNegative("stored-responses", o.stored, "none"),
		cli.NotNegative("queue", o.queue, "4 × --sessions"),
		cli.NotNegative("max-batch", o.maxBatch, "the planner's"),
		cli.NotNegative("shutdown-timeout", o.shutdown, "cancel at once"),
		cli.NotNegative("request-timeout", o.request, "no limit"),
		cli.Positive("body-timeout", o.body),
	); err != nil {
		return err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return cli.Usagef("--log-format %q: want text or json", o.logFormat)
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return cli.Usagef("--addr %q: want host:port, e.g. 127.0.0.1:8080", o.addr)
	}
	// Everything the flags say is checked before the port is taken: the
	// options as the library checks them, the checkpoint directory and its
	// tokenizer (a chat server without one would fail after the load).
	edit := func(k *k3.Options) {
		k.Sessions, k.MaxBatch, k.Speculate, k.TokenizerDir = o.sessions, o.maxBatch, o.spec.N, o.tokenizer
	}
	if err := o.mf.Check(edit); err != nil {
		return err
	}
	if err := cli.CheckCheckpoint(o.mf.Dir); err != nil {
		return err
	}
	if err := cli.CheckTokenizer(o.mf.Dir, o.tokenizer); err != nil {
		return err
	}
	// A generation running longer than this logs its progress; lines
	// every 2 s with --progress lines, none with off.
	var progressEvery time.Duration
	switch mode, err := o.mf.Progress.Mode(); {
	case err != nil:
		return err
	case mode == progress.Lines:
		progressEvery = progress.LinesEvery
	case mode == progress.Off:
		progressEvery = -1
	}
	var log *slog.Logger
	if o.logFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if o.name == "" {
		o.name = filepath.Base(filepath.Clean(o.mf.Dir))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", o.addr, err)
	}
	// The listener is up while the model loads: /health says 503 until
	// the real handler takes over.
	var h atomic.Pointer[http.Handler]
	loading := server.Loading()
	h.Store(&loading)
	base, cancelAll := context.WithCancelCause(context.Background())
	defer cancelAll(nil)
	hs := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
		// A backstop for the whole request read; the server sets a tighter
		// deadline (--body-timeout) when it reads a body.
		ReadTimeout: o.body + 30*time.Second,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "model", o.mf.Dir)

	m, err := o.mf.OpenWith(ctx, edit)
	if err != nil {
		hs.Close()
		if ctx.Err() != nil {
			log.Info("stopped while loading")
			return nil
		}
		return err
	}
	defer m.Close()
	if m.Tokenizer() == nil {
		hs.Close()
		return cli.Usagef("%s has no tokenizer; give --tokenizer DIR", o.mf.Dir)
	}
	srv, err := server.New(m, server.Options{Name: o.name, MaxContext: m.MaxContext(), Sessions: o.sessions, Queue: o.queue,
		MaxBodyBytes: maxBody, BodyTimeout: o.body, RequestTimeout: o.request, APIKey: o.apiKey, CORSOrigin: o.cors,
		Speculate: o.spec.N, Logger: log, LogBodies: o.logBodies, StoredResponses: storedResponses(o.stored), ProgressEvery: progressEvery})
	if err != nil {
		hs.Close()
		return err
	}
	ready := srv.Handler()
	h.Store(&ready)
	log.Info(cli.ContextNote(m, o.mf.MaxContext, o.sessions), "max_context", m.MaxContext(), "sessions", o.sessions)
	fmt.Fprintf(stdout, "serving %s on http://%s/v1\n", o.name, ln.Addr())
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	log.Info("shutting down", "timeout", o.shutdown.String())
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdown)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// Time is up: cancel what still runs, and give the handlers a
		// moment to write their last event.
		log.Warn("shutdown timeout: cancelling the requests still running", "active", srv.Active())
		cancelAll(server.ErrShutdown)
		c2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel2()
		hs.Shutdown(c2)
		hs.Close()
	}
	log.Info("stopped")
	return nil
}

// storedResponses is --stored-responses as server.Options takes it (0
// there means the default; none is negative).
func storedResponses(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
