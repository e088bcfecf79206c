// Package link is the transport between the ranks of a k3 cluster: rank 0
// (the k3 command) dials every worker (`k3 worker --listen HOST:PORT`),
// proves that both sides hold the shared cluster key, checks that both run
// the same protocol, k3 version, checkpoint, kernels and cluster size, and
// then exchanges checked frames. It knows nothing of rounds or tensors: a
// frame is a kind byte and a payload. It imports only the standard library.
//
// # Frames
//
// Every frame is a 24-byte header followed by its payload. All integers are
// big-endian.
//
//	offset size  field
//	0      4     magic "K3LK"
//	4      1     protocol version (Protocol)
//	5      1     kind (0x00–0xEF for the caller; 0xF0–0xFF are the handshake's)
//	6      2     flags, 0 (reserved: a frame with any flag set is refused)
//	8      8     payload length in bytes
//	16     4     CRC-32C (Castagnoli) of the payload
//	20     4     CRC-32C of header bytes 0–19
//
// The header carries its own CRC so that a damaged length is caught before
// the reader acts on it: with one CRC over header and payload, a flipped
// bit in the length would make the reader wait for bytes that never come
// (reported as a hung peer) or swallow the next frame before the mismatch
// showed. The payload's CRC sits in the header so that a sender can write
// the caller's buffers as they are (writev), with no copy and no trailer.
// The CRCs catch accidents (a bad NIC, a wrong peer, a bug), not an
// attacker: against a hostile network use TLS, whose records are
// authenticated.
//
// A reader checks, in order, the magic, the version, the header CRC, the
// flags and the length against the limit (Config.MaxFrame; 64 KiB before
// the handshake has authenticated the peer), and only then reads the
// payload, growing the caller's buffer as bytes arrive (never to more than
// twice what has arrived), so a header that claims 2^40 bytes, or a peer
// that claims 1 GiB and stops, costs no large allocation. A stream that ends
// inside a frame is ErrProtocol wrapping io.ErrUnexpectedEOF; a peer that
// stops sending inside a frame past the timeout is ErrTimeout.
//
// # Handshake
//
// Four frames, two round trips, inside Config.Timeout (after the TLS
// handshake when Config.TLS is set). Tags are HMAC-SHA256 under the key.
//
//  1. rank 0 → worker, kind 0xF0: a fresh 32-byte nonce Nc.
//  2. worker → rank 0, kind 0xF0: its fresh nonce Nw, then the tag of
//     ("worker key", Nc, Nw). Rank 0 checks it before it says anything
//     about itself; if it fails, rank 0 sends a refusal (kind 0xF3, "wrong
//     cluster key") instead of step 3.
//  3. rank 0 → worker, kind 0xF1: the tag of ("rank 0 hello", Nc, Nw, H0),
//     then H0, its Hello. The worker checks the tag (or refuses with
//     "wrong cluster key", revealing nothing else), then compares the
//     Hello with its own.
//  4. worker → rank 0, kind 0xF2: a tag, then V = accepted (1 byte),
//     len(Hw) (uint16), Hw (the worker's Hello), and the reason for a
//     refusal: every field that differs, with both values. The tag is of
//     ("worker verdict", Nc, Nw, H0, V). Rank 0 checks it and compares the
//     Hellos too.
//
// A Hello is protocol, ranks and rank (uint32 each), then version,
// fingerprint and kernels (each a uint16 length and at most 1 KiB).
//
// So each side proves the key to the other without sending it, both Hellos
// are bound to both nonces (a replayed or altered Hello fails its tag), and
// neither side's Hello reaches a peer that has not proven the key. Each
// HMAC input, the label included, is preceded by its length (uint32).
//
// Without TLS the key authenticates the peers when they connect; the
// frames after that are protected by CRCs only. Where the network between
// the ranks is not trusted, give certificates (TLS).
//
// # Errors
//
// Every error of Dial, Accept, Send and Recv is a *PeerError naming the
// peer ("rank 2 (10.0.0.3:7071)") and wraps one of ErrRefused, ErrTimeout,
// ErrProtocol or ErrClosed where one applies. A Conn whose Send or Recv
// failed is closed: the stream may be out of step, so the caller dials
// again.
package link

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"
)

// Protocol is the version of the frame format and handshake. It is the
// version byte of every frame, and the Protocol of a Hello left at zero.
const Protocol = 1

// Defaults for the zero values of Config.
const (
	// DefaultTimeout bounds a handshake and each Send and Recv.
	DefaultTimeout = 5 * time.Second
	// DefaultMaxFrame is the largest payload a Conn accepts.
	DefaultMaxFrame = 1 << 30
	// MinKeyLen is the shortest cluster key accepted, in bytes.
	MinKeyLen = 16
)

// Sentinel errors, matched with errors.Is through a *PeerError.
var (
	// ErrRefused: a side refused the handshake (wrong cluster key, a Hello
	// that differs, a TLS certificate not accepted). The message says why.
	ErrRefused = errors.New("refused")
	// ErrTimeout: a deadline passed with the exchange unfinished: the
	// peer hung, or the network did.
	ErrTimeout = errors.New("peer timed out")
	// ErrProtocol: a malformed, truncated, oversized or unexpected frame.
	ErrProtocol = errors.New("protocol error")
	// ErrClosed: the connection is closed, by this side or the peer, or
	// was broken by an earlier failure.
	ErrClosed = errors.New("connection closed")
	// ErrNoKey: no cluster key was given (see KeyFromEnvOrFile).
	ErrNoKey = errors.New("no cluster key")
)

// PeerError is the error of an operation with one peer: it names the peer
// (its rank and address) and the operation, and wraps the cause.
type PeerError struct {
	Rank int    // the peer's rank (0 for rank 0)
	Addr string // the peer's address
	Op   string // "dial", "handshake", "send" or "recv"
	Err  error  // the cause, wrapping a sentinel where one applies
}

// Error reads "rank 2 (10.0.0.3:7071): recv: peer timed out: ...".
func (e *PeerError) Error() string {
	return fmt.Sprintf("rank %d (%s): %s: %v", e.Rank, e.Addr, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

// Config is what both sides of a link are configured with.
type Config struct {
	// Key is the shared cluster key, at least MinKeyLen bytes. It is never
	// sent: each side proves it holds the key with an HMAC over fresh
	// nonces. Required.
	Key []byte
	// TLS, when set, runs every connection over TLS: a server config
	// (with a certificate) for Listen, a client config for Dial. It is
	// mutual when the server sets ClientAuth and the client has a
	// certificate; TLSConfig builds both from files. Dial fills in
	// ServerName from the address when it is empty.
	TLS *tls.Config
	// Timeout bounds a handshake and each Send and Recv (and so each
	// exchange: a peer that stops answering fails it within Timeout).
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxFrame is the largest payload accepted (and sent); a frame that
	// claims more is ErrProtocol, never allocated. 0 means
	// DefaultMaxFrame.
	MaxFrame int
}

// check validates c and returns it with the defaults filled in.
func (c Config) check() (Config, error) {
	if len(c.Key) < MinKeyLen {
		return c, fmt.Errorf("link: cluster key of %d bytes: at least %d required", len(c.Key), MinKeyLen)
	}
	if c.Timeout < 0 || c.MaxFrame < 0 {
		return c, fmt.Errorf("link: negative Timeout %v or MaxFrame %d", c.Timeout, c.MaxFrame)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = DefaultMaxFrame
	}
	return c, nil
}
