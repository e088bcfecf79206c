package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/k3go/k3/internal/engine/cluster"
	"github.com/k3go/k3/internal/engine/cluster/link"
	"github.com/k3go/k3/model"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// ClusterOptions configure the links between the ranks of a cluster.
type ClusterOptions struct {
	// Peers are the addresses of ranks 1..N-1 (k3 worker), in rank order;
	// empty: this process alone.
	Peers []string
	// Key is the shared cluster key (at least 16 bytes); TLS, when set,
	// makes the links TLS (mutual when it carries certificates).
	Key []byte
	TLS *tls.Config
	// Version is the k3 version this rank states at the handshake: ranks
	// of one cluster run the same k3 (the caller's, k3.Version).
	Version string
	// Timeout bounds a handshake and every round's answer: a rank that
	// does not answer in time fails the request in flight, naming it
	// (zero: DefaultPeerTimeout). LoadTimeout bounds a worker's loading of
	// its slice after the handshake (zero: DefaultPeerLoadTimeout).
	Timeout, LoadTimeout time.Duration
}

// Defaults of ClusterOptions.
const (
	DefaultPeerTimeout     = 30 * time.Second
	DefaultPeerLoadTimeout = 30 * time.Minute
)

// ErrClusterUnsupported reports something the engine does not do yet in a
// cluster; the error says what.
var ErrClusterUnsupported = errors.New("not supported in a cluster yet")

// Kernels names the kernel implementations this process computes with
// (dense/MXFP4): ranks of one cluster must use the same, since another
// kernel may round differently.
func Kernels() string { return tensor.Implementation() + "/" + quant.Implementation() }

// linkConfig is the links' configuration.
func (o *ClusterOptions) linkConfig() link.Config {
	t := o.Timeout
	if t <= 0 {
		t = DefaultPeerTimeout
	}
	return link.Config{Key: o.Key, TLS: o.TLS, Timeout: t}
}

// connect dials every peer as rank 0 of a cluster of plan's checkpoint and
// returns the client once each has loaded its slice.
func (e *Engine) connect(ctx context.Context, plan *model.Plan) (*cluster.Client, error) {
	o := &e.opts.Cluster
	fp, err := plan.Ckpt.Fingerprint()
	if err != nil {
		return nil, err
	}
	cfg := o.linkConfig()
	load := o.LoadTimeout
	if load <= 0 {
		load = DefaultPeerLoadTimeout
	}
	n := len(o.Peers) + 1
	dials := make([]cluster.Dialer, len(o.Peers))
	for i, addr := range o.Peers {
		dials[i] = func(ctx context.Context, rank int) (cluster.Conn, error) {
			hello := link.Hello{Version: cluster.HelloVersion(o.Version), Fingerprint: fp, Kernels: Kernels(), Ranks: n, Rank: rank}
			c, err := link.Dial(ctx, addr, cfg, hello)
			if err != nil {
				return nil, err
			}
			c.SetTimeout(load)
			if err := cluster.AwaitReady(c); err != nil {
				c.Close()
				return nil, err
			}
			c.SetTimeout(cfg.Timeout)
			return c, nil
		}
	}
	e.log.Info("k3: cluster: connecting", "ranks", n, "peers", o.Peers)
	return cluster.NewClient(ctx, dials, e.log)
}

// ClusterState is a cluster's size, the ranks connected (rank 0
// included), its health (nil while every rank is connected, or in one
// process) and its client's counters (zero in one process).
type ClusterState struct {
	Ranks, Up int
	Health    error
	Stats     cluster.Stats
}

// Cluster returns the cluster's state.
func (e *Engine) Cluster() ClusterState {
	if e.cluster == nil {
		return ClusterState{Ranks: 1, Up: 1}
	}
	return ClusterState{Ranks: e.cluster.Size(), Up: e.cluster.Connected(), Health: e.cluster.Health(), Stats: e.cluster.Stats()}
}

// checkClusterOptions refuses what a cluster does not do yet.
func checkClusterOptions(opts Options) error {
	if len(opts.Cluster.Peers) == 0 {
		return nil
	}
	if opts.TrunkDir != "" {
		return fmt.Errorf("k3: a packed trunk (TrunkDir): %w (each rank reads its rows from the checkpoint)", ErrClusterUnsupported)
	}
	if len(opts.Cluster.Key) == 0 {
		return fmt.Errorf("k3: %w: a cluster needs a shared key (Options.ClusterKey, k3 --cluster-key)", ErrBadOptions)
	}
	return nil
}
