package k3

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/k3go/k3/internal/engine"
)

// ClusterOptions make a process rank 0 of a cluster (Options.Cluster): the
// model runs over it and the workers at Peers, ranks 1..N-1 in order,
// each a process (k3 worker, or a Go program with a Worker) with a disk
// and a RAM budget of its own. Every rank holds its rows of every weight
// matrix (the trunk's, every routed expert's, the output head's), pinned
// where its budget allows and streamed from its own disk where it does
// not, and computes whole dot products for them; rank 0 places the rows
// side by side, never summing across ranks, so the logits are the same
// bits at every rank count. Rank 0 holds every sequence's state and does
// the rest of the work (tokenizer, sampling, attention over the caches).
type ClusterOptions struct {
	// Peers are the workers' addresses (host:port), rank 1 first.
	Peers []string
	// Key is the shared cluster key every rank proves it holds (at least
	// 16 bytes; never sent). TLS, when set, carries the links over TLS,
	// mutual when it has client certificates (k3 --cluster-cert).
	Key []byte
	TLS *tls.Config
	// Timeout bounds a handshake and each round's answer: a worker that
	// dies or hangs fails the requests in flight within it, with an error
	// naming the rank, and is dialled again until it is back (Health).
	// Zero: 30 s. LoadTimeout bounds a worker's loading of its rows after
	// it connects; zero: 30 min.
	Timeout, LoadTimeout time.Duration
}

func (o *ClusterOptions) engineOptions() engine.ClusterOptions {
	if o == nil {
		return engine.ClusterOptions{}
	}
	return engine.ClusterOptions{Version: Version, Peers: o.Peers, Key: o.Key, TLS: o.TLS, Timeout: o.Timeout, LoadTimeout: o.LoadTimeout}
}

// ClusterStats describe a model's cluster (one rank without one).
type ClusterStats struct {
	// Ranks is the cluster's size, Up how many are connected now (rank 0
	// included); Health nil while every rank is connected, else an error
	// naming each missing rank and why.
	Ranks, Up int
	Health    error
	// Rounds counts the exchanges with the workers (one per group of
	// products of a pass, for all its rows), BytesSent and BytesReceived
	// their traffic summed over the workers, RoundTime their wall time
	// and WaitTime the part of it rank 0 waited for workers after its own
	// rows were done.
	Rounds, BytesSent, BytesReceived int64
	RoundTime, WaitTime              time.Duration
	// StateBytes counts the KDA heads of sequences' states moved between
	// rank 0 and the workers, both ways: a saved session's state read
	// from every rank, a loaded one dealt out to them, both for a fork.
	// Passes, speculation and its rollbacks, and prefix-cache saves and
	// restores move none (each rank keeps, records and stores its own
	// heads).
	StateBytes int64
}

// Cluster returns the model's cluster's health and counters.
func (m *Model) Cluster() ClusterStats {
	c := m.e.Cluster()
	st := c.Stats
	return ClusterStats{Ranks: c.Ranks, Up: c.Up, Health: c.Health, Rounds: st.Rounds, BytesSent: st.BytesSent, BytesReceived: st.BytesReceived,
		RoundTime: st.RoundTime, WaitTime: st.WaitTime, StateBytes: st.StateBytes}
}

// Version is this k3's version, which the ranks of a cluster compare at
// their handshake.
const Version = "0.2.0-dev"

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// RAMBudget bounds the worker process's peak resident set (0:
	// everything resident); Threads the kernels' threads (0: GOMAXPROCS);
	// IOQueueDepth the reads in flight (0: 8).
	RAMBudget             int64
	Threads, IOQueueDepth int
	// Rank and Ranks, when set, load that rank's rows at once and refuse a
	// rank 0 that expects another (a StatefulSet's ordinal); zero learns
	// them from the first rank 0 that connects.
	Rank, Ranks int
	// Sessions is the sequences rank 0 keeps at once (its
	// Options.Sessions; 0: 1): the worker's budget holds its heads of
	// each one's KDA state (the ranks split KDA by heads).
	Sessions int
	// Speculate is rank 0's Options.Speculate (a number, or
	// SpeculateAuto; 0: none): each rank copies, records and rolls back
	// its own KDA heads of a speculating sequence, and the worker's budget
	// holds them for each session. A worker told less allocates what rank
	// 0's speculation needs anyway, beyond its plan.
	Speculate int
	// PrefixCache keeps the worker's slices of rank 0's prefix-cache
	// entries (Options.PrefixCache): each rank keeps its KDA heads of
	// every state entry under rank 0's key, so that a save or a restore
	// moves no state between the ranks. RAMBytes is its RAM tier inside
	// RAMBudget (0: room for two slices per session; negative: none), Dir
	// and DiskBytes its disk tier as for rank 0; BlockTokens and
	// CheckpointBlocks are rank 0's and ignored here. Nil: the default RAM
	// tier and no disk tier. A worker that keeps no slice of an entry
	// makes rank 0 prefill instead of restoring it.
	PrefixCache *PrefixCacheOptions
	// Key, TLS and Timeout are as in ClusterOptions.
	Key     []byte
	TLS     *tls.Config
	Timeout time.Duration
	Logger  *slog.Logger
}

// workerSpeculate is the draft length a worker plans for rank 0's
// Options.Speculate.
func workerSpeculate(n int) int {
	if n == SpeculateAuto {
		return AutoDraft
	}
	return max(n, 0)
}

// Worker is a rank other than 0 of a cluster: it serves one rank 0 (the
// process whose Options.Cluster lists it) with its rows of every product.
type Worker struct{ w *engine.Worker }

// NewWorker opens the checkpoint in dir for a worker: its config and
// headers, and its fingerprint (rank 0 must hold the same checkpoint).
func NewWorker(dir string, opts WorkerOptions) (*Worker, error) {
	return NewWorkerContext(context.Background(), dir, opts)
}

// NewWorkerContext is NewWorker with a context that can cancel loading.
func NewWorkerContext(ctx context.Context, dir string, opts WorkerOptions) (*Worker, error) {
	cfg, err := engine.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	w, err := engine.OpenWorker(ctx, dir, cfg, engine.WorkerOptions{RAMBudget: opts.RAMBudget, Threads: opts.Threads,
		IOQueueDepth: opts.IOQueueDepth, Rank: opts.Rank, Ranks: opts.Ranks, Sessions: opts.Sessions, Speculate: workerSpeculate(opts.Speculate), Prefix: opts.PrefixCache.engineOptions(), Version: Version, Key: opts.Key, TLS: opts.TLS,
		Timeout: opts.Timeout, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return &Worker{w: w}, nil
}

// ListenAndServe listens on addr (host:port; nowhere else) and serves the
// rank 0 that connects, one at a time, until ctx ends; ready, if not nil,
// is called with the address once it listens.
func (w *Worker) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	if err := w.w.ListenAndServe(ctx, addr, ready); err != nil {
		return fmt.Errorf("k3: %w", err)
	}
	return nil
}

// Fingerprint returns the checkpoint's content fingerprint.
func (w *Worker) Fingerprint() string { return w.w.Fingerprint() }

// Close stops serving and gives back the worker's memory and files.
func (w *Worker) Close() error { return w.w.Close() }
