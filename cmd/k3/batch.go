package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/batchjob"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/progress"
	"github.com/k3go/k3/internal/app/server"
)

// batchHandlerOptions are what k3 batch tells the API handler it sends
// its requests to.
type batchHandlerOptions struct {
	// Name is the model id requests may name in "model".
	Name string
	// MaxContext is the model's positions per session (prompt and
	// completion).
	MaxContext int
	// Parallel is the number of generations the handler runs at once, each
	// in a session of its own (--sessions).
	Parallel int
	// Queue is the number of requests that may wait beyond those running:
	// the runner keeps --concurrency in flight, so none is turned away.
	Queue int
	// RequestTimeout bounds one request, waiting included (--request-timeout).
	RequestTimeout time.Duration
	// Speculate is every generation's GenerateOptions.Speculate (--spec).
	Speculate int
}

// newBatchHandler builds the OpenAI-compatible handler k3 batch sends its
// requests to, in process: the same internal/app/server that k3 serve runs, so a
// batch result's body is exactly what the server would have answered.
func newBatchHandler(m *k3.Model, o batchHandlerOptions) (http.Handler, error) {
	s, err := server.New(m, server.Options{Name: o.Name, MaxContext: o.MaxContext, Sessions: o.Parallel,
		Queue: o.Queue, RequestTimeout: o.RequestTimeout, Speculate: o.Speculate})
	if err != nil {
		return nil, err
	}
	return s.Handler(), nil
}

// batchConfig is a parsed k3 batch command line.
type batchConfig struct {
	mf                    cli.ModelFlags
	input, output, name   string
	shard, shards         int
	sessions, concurrency int
	maxBatch              int
	every, timeout        time.Duration
	spec                  cli.SpecFlag
}

// parseBatch reads k3 batch's flags and fills in the defaults that depend
// on others.
func parseBatch(args []string, stderr io.Writer) (*batchConfig, error) {
	fs := cli.NewFlags("batch", "--model DIR --input requests.jsonl --output results.jsonl [--shard i/N] [flags]", stderr)
	c := &batchConfig{}
	c.mf.PrefixByDefault = true
	c.mf.AutoContext = true
	c.mf.Register(fs)
	c.spec.Register(fs, k3.SpeculateAuto)
	fs.StringVar(&c.input, "input", "", "requests `file`: one OpenAI Batch API request per line, {\"custom_id\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\" or \"/v1/completions\",\"body\"}")
	fs.StringVar(&c.output, "output", "", "results `file`, one line per request; rerun with the same file to resume: the custom_ids already in it are skipped")
	shard := fs.String("shard", "0/1", "take the input lines whose 0-based index is i mod N (`i/N`), so N machines split one job")
	fs.IntVar(&c.sessions, "sessions", 4, "generations at once, each holding a session's state; their steps share passes over the weights")
	fs.IntVar(&c.concurrency, "concurrency", 0, "requests in flight at once (0 = --sessions); more than --sessions wait for a session")
	fs.IntVar(&c.maxBatch, "max-batch", 0, "most token `rows` one pass over the weights carries, summed over the sessions in it (0 = the planner's: sized to the budget)")
	fs.StringVar(&c.name, "name", "", "model id a request's \"model\" must match, if it names one (default: the checkpoint directory's name)")
	fs.DurationVar(&c.timeout, "request-timeout", 24*time.Hour, "most time one request may take, waiting for a session included; a request past it gets its error line (0 = no limit)")
	fs.DurationVar(&c.every, "progress-every", 30*time.Second, "period of the progress line when stderr is not a terminal")
	cli.InputFiles(fs, "input")
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	var err error
	if c.shard, c.shards, err = parseShard(*shard); err != nil {
		return nil, err
	}
	if err := cli.FirstError(
		cli.Positive("sessions", c.sessions),
		cli.NotNegative("concurrency", c.concurrency, "--sessions"),
		cli.NotNegative("max-batch", c.maxBatch, "the planner's"),
		cli.Positive("progress-every", c.every),
		cli.NotNegative("request-timeout", c.timeout, "no limit"),
	); err != nil {
		return nil, err
	}
	if c.input == "" || c.output == "" {
		return nil, cli.Usagef("--input and --output are required")
	}
	if err := c.mf.Check(func(o *k3.Options) { o.Sessions, o.MaxBatch = c.sessions, c.maxBatch }); err != nil {
		return nil, err
	}
	if c.concurrency == 0 {
		c.concurrency = c.sessions
	}
	if c.name == "" {
		c.name = filepath.Base(filepath.Clean(c.mf.Dir))
	}
	return c, nil
}

func runBatch(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	c, err := parseBatch(args, stderr)
	if err != nil {
		return err
	}
	// SIGTERM too: it is how Kubernetes stops a pod. Requests in flight
	// are dropped and sent again by the rerun.
	// The requests are text: a checkpoint without a tokenizer is refused
	// before any weight is read.
	if err := cli.CheckCheckpoint(c.mf.Dir); err != nil {
		return err
	}
	if err := cli.CheckTokenizer(c.mf.Dir, ""); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := c.mf.OpenWith(ctx, func(o *k3.Options) { o.Sessions, o.MaxBatch, o.Speculate = c.sessions, c.maxBatch, c.spec.N })
	if err != nil {
		return err
	}
	defer m.Close()
	if c.mf.MaxContext == 0 {
		fmt.Fprintf(stderr, "k3 batch: %s\n", cli.ContextNote(m, 0, c.sessions))
	}
	h, err := newBatchHandler(m, batchHandlerOptions{Name: c.name, MaxContext: m.MaxContext(), Parallel: c.sessions,
		Queue: max(c.concurrency-c.sessions, 0), RequestTimeout: c.timeout, Speculate: c.spec.N})
	if err != nil {
		return err
	}
	f, isFile := stderr.(*os.File)
	// The job's own line shows the requests; the model's passes and
	// bytes read go on it, so that a long request is seen to move.
	mode, err := c.mf.Progress.Mode()
	if err != nil {
		return err
	}
	work := cli.NewWatch(m, io.Discard, progress.Off)
	defer work.Close()
	work.Passes("model")
	var out io.Writer = stderr
	if mode == progress.Off {
		out = nil
	}
	sum, err := batchjob.Run(ctx, h, batchjob.Options{Input: c.input, Output: c.output, Shard: c.shard, Shards: c.shards,
		Concurrency: c.concurrency, Progress: out, ProgressTerminal: isFile && progress.IsTerminal(f) && mode == progress.Auto, ProgressEvery: c.every,
		ProgressDetail: work.Status, GroupPrefixes: prefixOn(&c.mf)})
	if sum.Selected > 0 {
		printBatchSummary(stderr, c.output, sum)
	}
	if errors.Is(err, batchjob.ErrBadOptions) || errors.Is(err, batchjob.ErrBadInput) {
		return cli.Usagef("%v", err)
	}
	return err
}

// parseShard reads "i/N" with 0 <= i < N.
func parseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, cli.Usagef("--shard %q: want i/N with 0 <= i < N, e.g. 0/4", s)
	}
	return i, n, nil
}

func printBatchSummary(w io.Writer, output string, s batchjob.Summary) {
	if s.Truncated > 0 {
		fmt.Fprintf(w, "k3 batch: dropped a torn last line (%d bytes) from %s, left by a run that was killed\n", s.Truncated, output)
	}
	if s.Foreign > 0 {
		fmt.Fprintf(w, "k3 batch: note: %s holds %d results for requests not in this input or shard\n", output, s.Foreign)
	}
	fmt.Fprintf(w, "k3 batch: %d of %d requests done (%d this run, %d failed, %d from before), %d tokens in %s (%.1f tok/s)\n",
		s.Skipped+s.Written, s.Selected, s.Written, s.Failed, s.Skipped, s.CompletionTokens, s.Elapsed.Round(time.Millisecond),
		float64(s.CompletionTokens)/max(s.Elapsed.Seconds(), 1e-9))
}

// prefixOn reports whether the model was opened with its prefix cache.
func prefixOn(mf *cli.ModelFlags) bool {
	o, err := mf.Prefix.Options()
	return err == nil && o != nil
}
