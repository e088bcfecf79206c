package cli

import (
	"crypto/tls"
	"flag"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine/cluster/link"
)

// ClusterFlags are the flags of a cluster's links, which every model
// command (rank 0, with --peers) and k3 worker share: the shared key
// (--cluster-key-file, $K3_CLUSTER_KEY, or --cluster-key, which other
// users of the machine can see), TLS certificates, and the timeout.
type ClusterFlags struct {
	Peers            string
	Key, KeyFile     string
	Cert, CertKey    string
	CA               string
	Timeout          time.Duration
	LoadTimeout      time.Duration
	withPeers, isSrv bool
}

// RegisterPeers defines the flags of rank 0 (--peers and the links').
func (c *ClusterFlags) RegisterPeers(fs *flag.FlagSet) {
	c.withPeers = true
	fs.StringVar(&c.Peers, "peers", "", "run one model over this process (rank 0) and the k3 workers at `HOST:PORT[,HOST:PORT...]` (ranks 1..N-1 in this order), each holding and reading its rows of every weight; the output is the same bits")
	fs.DurationVar(&c.LoadTimeout, "peer-load-timeout", 0, "how long a worker may take to load its rows once connected (0 = 30m)")
	c.register(fs)
}

// RegisterWorker defines the flags of k3 worker (the links').
func (c *ClusterFlags) RegisterWorker(fs *flag.FlagSet) {
	c.isSrv = true
	c.register(fs)
}

func (c *ClusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.KeyFile, "cluster-key-file", "", "`file` holding the cluster's shared key (at least 16 bytes; e.g. openssl rand -hex 32); or set $"+link.KeyEnv)
	fs.StringVar(&c.Key, "cluster-key", "", "the cluster's shared `key` (visible to other users in the process list: prefer --cluster-key-file or $"+link.KeyEnv+")")
	fs.StringVar(&c.Cert, "cluster-cert", "", "TLS certificate `file` (PEM) of this rank: the links run over TLS (a worker needs one for TLS)")
	fs.StringVar(&c.CertKey, "cluster-cert-key", "", "the TLS certificate's private key `file` (PEM)")
	fs.StringVar(&c.CA, "cluster-ca", "", "CA certificate `file` (PEM) that signs the other ranks' certificates: mutual TLS (a worker then requires rank 0's certificate)")
	fs.DurationVar(&c.Timeout, "peer-timeout", 0, "how long a rank may take to answer a handshake or a round before the requests in flight fail naming it (0 = 30s)")
	InputFiles(fs, "cluster-key-file", "cluster-cert", "cluster-cert-key", "cluster-ca")
}

// check refuses negative timeouts and, for rank 0, link flags without
// --peers (they would be ignored), naming the flag and the value.
func (c *ClusterFlags) check() error {
	if err := FirstError(NotNegative("peer-timeout", c.Timeout, "30s"), NotNegative("peer-load-timeout", c.LoadTimeout, "30m")); err != nil {
		return err
	}
	if !c.withPeers || strings.TrimSpace(c.Peers) != "" {
		return nil
	}
	for name, set := range map[string]bool{"cluster-key": c.Key != "", "cluster-key-file": c.KeyFile != "", "cluster-cert": c.Cert != "",
		"cluster-cert-key": c.CertKey != "", "cluster-ca": c.CA != "", "peer-timeout": c.Timeout != 0, "peer-load-timeout": c.LoadTimeout != 0} {
		if set {
			return Usagef("--%s applies with --peers (a cluster) only", name)
		}
	}
	return nil
}

// peers returns the --peers addresses.
func (c *ClusterFlags) peers() ([]string, error) {
	if strings.TrimSpace(c.Peers) == "" {
		return nil, nil
	}
	var out []string
	for _, p := range strings.Split(c.Peers, ",") {
		p = strings.TrimSpace(p)
		if p == "" || !strings.Contains(p, ":") {
			return nil, Usagef("--peers %q: %q is not HOST:PORT", c.Peers, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// key returns the shared key, a usage error naming the flags when there is
// none or it is too short.
func (c *ClusterFlags) key() ([]byte, error) {
	k, err := link.KeyFromEnvOrFile(c.Key, c.KeyFile, link.KeyEnv)
	if err != nil {
		return nil, Usagef("--cluster-key-file / $%s: %v", link.KeyEnv, err)
	}
	return k, nil
}

// tls returns the links' TLS configuration, nil without certificates.
func (c *ClusterFlags) tls() (*tls.Config, error) {
	if c.Cert == "" && c.CertKey == "" && c.CA == "" {
		return nil, nil
	}
	cfg, err := link.TLSConfig(c.Cert, c.CertKey, c.CA, c.isSrv)
	if err != nil {
		return nil, Usagef("--cluster-cert / --cluster-cert-key / --cluster-ca: %v", err)
	}
	return cfg, nil
}

// Options returns rank 0's cluster options, nil without --peers.
func (c *ClusterFlags) Options() (*k3.ClusterOptions, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	peers, err := c.peers()
	if err != nil || peers == nil {
		return nil, err
	}
	key, err := c.key()
	if err != nil {
		return nil, err
	}
	t, err := c.tls()
	if err != nil {
		return nil, err
	}
	return &k3.ClusterOptions{Peers: peers, Key: key, TLS: t, Timeout: c.Timeout, LoadTimeout: c.LoadTimeout}, nil
}

// WorkerOptions fills a worker's link options.
func (c *ClusterFlags) WorkerOptions(o *k3.WorkerOptions) error {
	if err := c.check(); err != nil {
		return err
	}
	key, err := c.key()
	if err != nil {
		return err
	}
	t, err := c.tls()
	if err != nil {
		return err
	}
	o.Key, o.TLS, o.Timeout = key, t, c.Timeout
	return nil
}
