package link

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
)

// KeyEnv is the environment variable the command reads the cluster key
// from when no flag gives it.
const KeyEnv = "K3_CLUSTER_KEY"

// maxKeyFile bounds what KeyFromEnvOrFile reads of a key file.
const maxKeyFile = 4096

// KeyFromEnvOrFile returns the cluster key from, in order, flagValue (a
// --cluster-key value), file (a --cluster-key-file path: its contents,
// without trailing white space, so `openssl rand -hex 32 > key` works)
// or the environment variable env (KeyEnv for the command). Giving both a
// value and a file is an error, as is a key shorter than MinKeyLen; giving
// none is ErrNoKey. The file and the environment keep the key off the
// command line, where other users of the machine can read it.
func KeyFromEnvOrFile(flagValue, file, env string) ([]byte, error) {
	var key []byte
	var from string
	switch {
	case flagValue != "" && file != "":
		return nil, errors.New("link: cluster key given both as a value and as a file: give one")
	case flagValue != "":
		key, from = []byte(flagValue), "the --cluster-key value"
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("link: cluster key file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
		if err != nil {
			return nil, fmt.Errorf("link: cluster key file %s: %w", file, err)
		}
		if len(b) > maxKeyFile {
			return nil, fmt.Errorf("link: cluster key file %s is larger than %d bytes: not a key?", file, maxKeyFile)
		}
		key, from = bytes.TrimRight(b, " \t\r\n"), "cluster key file "+file
	case env != "" && os.Getenv(env) != "":
		key, from = []byte(os.Getenv(env)), "$"+env
	default:
		return nil, fmt.Errorf("link: %w: give --cluster-key-file FILE or set $%s (or --cluster-key, visible to other users)", ErrNoKey, env)
	}
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("link: the key from %s has %d bytes, at least %d required (e.g. openssl rand -hex 32)", from, len(key), MinKeyLen)
	}
	return key, nil
}

// TLSConfig builds a TLS 1.3 config from PEM files, for Listen (server) or
// Dial. certFile and keyFile (both or neither) are this side's
// certificate; a worker needs one, rank 0 needs one for mutual TLS.
// caFile, when given, is the CA that signs the peers' certificates: a
// worker then requires and verifies rank 0's certificate, and rank 0
// verifies the worker's against it instead of the system's roots.
func TLSConfig(certFile, keyFile, caFile string, server bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	switch {
	case (certFile == "") != (keyFile == ""):
		return nil, errors.New("link: TLS needs both a certificate file and a key file, or neither")
	case certFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("link: TLS certificate %s, key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case server:
		return nil, errors.New("link: a TLS server (worker) needs a certificate and key file")
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("link: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("link: TLS CA %s holds no PEM certificate", caFile)
		}
		if server {
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		} else {
			cfg.RootCAs = pool
		}
	}
	return cfg, nil
}
