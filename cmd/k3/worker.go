package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
)

// runWorker is "k3 worker": one rank other than 0 of a cluster. It holds
// its rows of every weight matrix of the checkpoint (pinned where its
// budget allows, streamed from its own disk where it does not) and
// answers the rounds of the rank 0 (a k3 command with --peers) that
// connects, until SIGINT or SIGTERM.
func runWorker(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("worker", "--model DIR --listen HOST:PORT --budget SIZE [--threads N] [--sessions N] [--spec auto|N] [--rank R --ranks N] [--prefix-cache-dir DIR] (--cluster-key-file FILE | $K3_CLUSTER_KEY)", stderr)
	dir := fs.String("model", "", "checkpoint `directory`: the same checkpoint as rank 0's (its fingerprint is compared)")
	listen := fs.String("listen", "", "the `HOST:PORT` to listen on (and nowhere else), e.g. 0.0.0.0:7070 in a pod, 127.0.0.1:7070 on one machine")
	threads := fs.Int("threads", 0, "kernel threads (0 = GOMAXPROCS)")
	rank := fs.Int("rank", 0, "this worker's rank, 1..N-1: load its rows at once and refuse a rank 0 that expects another (0 = learn it from rank 0)")
	ranks := fs.Int("ranks", 0, "the cluster's size N, with --rank")
	sessions := fs.Int("sessions", 1, "sequences rank 0 keeps at once (its --sessions): the worker's budget holds its KDA heads of each")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the worker's whole run to `file` (go tool pprof), written when it stops")
	var budget cli.BudgetFlags
	budget.Register(fs)
	var cf cli.ClusterFlags
	cf.RegisterWorker(fs)
	var pf cli.PrefixFlags
	pf.RegisterWorker(fs)
	var spec cli.SpecFlag
	spec.RegisterWorker(fs)
	cli.InputDirs(fs, "model")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if err := cli.FirstError(cli.NotNegative("threads", *threads, "GOMAXPROCS"), cli.NotNegative("rank", *rank, "learn it from rank 0"), cli.Positive("sessions", *sessions),
		cli.NotNegative("ranks", *ranks, "learn it from rank 0")); err != nil {
		return err
	}
	if _, err := budget.Bytes(); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return cli.Usagef("--model is required")
	case *listen == "":
		return cli.Usagef("--listen HOST:PORT is required")
	case (*rank == 0) != (*ranks == 0):
		return cli.Usagef("--rank and --ranks go together")
	case *ranks != 0 && (*ranks < 2 || *rank < 1 || *rank >= *ranks):
		return cli.Usagef("--rank %d of --ranks %d: a worker is rank 1..N-1 of N >= 2", *rank, *ranks)
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return cli.Usagef("--listen %q: %v", *listen, err)
	}
	b, err := budget.Bytes()
	if err != nil {
		return err
	}
	prefix, err := pf.WorkerOptions()
	if err != nil {
		return err
	}
	opts := k3.WorkerOptions{RAMBudget: b, Threads: *threads, Rank: *rank, Ranks: *ranks, Sessions: *sessions, Speculate: spec.N, PrefixCache: prefix,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if err := cf.WorkerOptions(&opts); err != nil {
		return err
	}
	stopProfile, err := cli.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, cancel := writerSignalContext()
	defer cancel()
	w, err := k3.NewWorkerContext(ctx, *dir, opts)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.ListenAndServe(ctx, *listen, func(a net.Addr) {
		fmt.Fprintf(stderr, "k3 worker: listening on %s (checkpoint %s, fingerprint %s)\n", a, *dir, w.Fingerprint())
	})
}
