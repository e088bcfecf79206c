package link

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Hello is what each side states at the handshake. The worker refuses a
// rank 0 whose Hello differs from its own in any field, naming every field
// that differs with both values; rank 0 checks the worker's in turn.
type Hello struct {
	Protocol    int    // frame and handshake version; 0 means Protocol
	Version     string // k3 version (the caller passes it)
	Fingerprint string // checkpoint content fingerprint
	Kernels     string // kernel choice, e.g. "avx512/avx512"
	Ranks       int    // cluster size N, at least 2
	Rank        int    // the worker's rank 1..N-1 (rank 0 states the rank it expects)
}

// maxHelloString bounds each string of a Hello.
const maxHelloString = 1024

// check fills in Protocol and validates h.
func (h Hello) check() (Hello, error) {
	if h.Protocol == 0 {
		h.Protocol = Protocol
	}
	if h.Ranks < 2 || h.Rank < 1 || h.Rank >= h.Ranks {
		return h, fmt.Errorf("link: Hello with rank %d of %d ranks: a worker is rank 1..N-1 of N >= 2", h.Rank, h.Ranks)
	}
	if h.Protocol < 0 || h.Protocol > 0xFFFF {
		return h, fmt.Errorf("link: Hello.Protocol %d out of range", h.Protocol)
	}
	for _, s := range []string{h.Version, h.Fingerprint, h.Kernels} {
		if len(s) > maxHelloString {
			return h, fmt.Errorf("link: Hello string of %d bytes, at most %d", len(s), maxHelloString)
		}
	}
	return h, nil
}

// marshal encodes a checked Hello: protocol, ranks and rank as uint32,
// then version, fingerprint and kernels, each with a uint16 length.
func (h Hello) marshal() []byte {
	b := make([]byte, 0, 18+len(h.Version)+len(h.Fingerprint)+len(h.Kernels))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Protocol))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Ranks))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Rank))
	for _, s := range []string{h.Version, h.Fingerprint, h.Kernels} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return b
}

// unmarshalHello decodes what marshal encodes, strictly: no bytes missing
// or left over, no string longer than maxHelloString, no count past
// 1<<24.
func unmarshalHello(b []byte) (Hello, error) {
	bad := func(what string) (Hello, error) {
		return Hello{}, fmt.Errorf("%w: malformed Hello: %s", ErrProtocol, what)
	}
	if len(b) < 12 {
		return bad("short")
	}
	var h Hello
	for _, p := range []*int{&h.Protocol, &h.Ranks, &h.Rank} {
		v := binary.BigEndian.Uint32(b)
		if v > 1<<24 {
			return bad("count out of range")
		}
		*p, b = int(v), b[4:]
	}
	for _, p := range []*string{&h.Version, &h.Fingerprint, &h.Kernels} {
		if len(b) < 2 {
			return bad("short")
		}
		n := int(binary.BigEndian.Uint16(b))
		if n > maxHelloString || len(b)-2 < n {
			return bad("string length")
		}
		*p, b = string(b[2:2+n]), b[2+n:]
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return h, nil
}

// diff lists every field in which the worker's Hello differs from rank
// 0's, with both values, or returns "".
func diff(worker, rank0 Hello) string {
	var d []string
	if worker.Protocol != rank0.Protocol {
		d = append(d, fmt.Sprintf("protocol differs: worker %d, rank 0 %d", worker.Protocol, rank0.Protocol))
	}
	if worker.Version != rank0.Version {
		d = append(d, fmt.Sprintf("k3 version differs: worker %q, rank 0 %q", worker.Version, rank0.Version))
	}
	if worker.Fingerprint != rank0.Fingerprint {
		d = append(d, fmt.Sprintf("checkpoint fingerprint differs: worker %q, rank 0 %q", worker.Fingerprint, rank0.Fingerprint))
	}
	if worker.Kernels != rank0.Kernels {
		d = append(d, fmt.Sprintf("kernels differ: worker %q, rank 0 %q", worker.Kernels, rank0.Kernels))
	}
	if worker.Ranks != rank0.Ranks {
		d = append(d, fmt.Sprintf("cluster size differs: worker %d ranks, rank 0 %d ranks", worker.Ranks, rank0.Ranks))
	}
	if worker.Rank != rank0.Rank {
		d = append(d, fmt.Sprintf("rank differs: worker is rank %d, rank 0 expects rank %d", worker.Rank, rank0.Rank))
	}
	return strings.Join(d, "; ")
}

// mac is HMAC-SHA256 under key of a label (which step, so that no tag of
// one step serves as another's) and parts, each of them preceded by its
// length so that no two sequences of parts give the same input.
func mac(key []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range append([][]byte{[]byte(label)}, parts...) {
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p))))
		m.Write(p)
	}
	return m.Sum(nil)
}

// nonceLen and tagLen are the sizes of the handshake's nonces and tags.
const (
	nonceLen = 32
	tagLen   = sha256.Size
)

// wrongKey is the refusal for a peer that did not prove the key.
const wrongKey = "wrong cluster key"

// Dial connects to the worker at addr as rank 0, runs the handshake
// (within cfg.Timeout and ctx) stating hello, in which hello.Rank is the
// rank the worker must be, and returns the link. Every error but a bad
// cfg or hello is a *PeerError naming the worker.
func Dial(ctx context.Context, addr string, cfg Config, hello Hello) (*Conn, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if hello, err = hello.check(); err != nil {
		return nil, err
	}
	fail := func(op string, err error) error {
		return &PeerError{Rank: hello.Rank, Addr: addr, Op: op, Err: err}
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(hctx, "tcp", addr)
	if err != nil {
		return nil, fail("dial", ctxError(ctx, hctx, err, cfg.Timeout))
	}
	if cfg.TLS != nil {
		tc := cfg.TLS
		if tc.ServerName == "" && !tc.InsecureSkipVerify {
			tc = tc.Clone()
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		nc = tls.Client(nc, tc)
	}
	c := newConn(nc, hello.Rank, addr, cfg)
	if err := c.handshake(ctx, hctx, cfg, func(hs *handshake) error { return hs.dial(hello) }); err != nil {
		c.Close()
		return nil, fail("handshake", err)
	}
	return c, nil
}

// Listener accepts links from rank 0 on one address.
type Listener struct {
	ln  net.Listener
	cfg Config
}

// Listen listens on addr, and only there, for rank 0. With cfg.TLS set,
// the config must hold the worker's certificate.
func Listen(addr string, cfg Config) (*Listener, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil {
		return nil, errors.New("link: Listen with a TLS config that has no certificate")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("link: listen: %w", err)
	}
	return &Listener{ln: ln, cfg: cfg}, nil
}

// Addr is the address the listener listens on.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening; a blocked Accept returns ErrClosed. Established
// links stay open.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits for rank 0 (until ctx ends or Close), runs the handshake
// within the timeout, refusing a peer without the key or whose Hello
// differs from self, and returns the link and the peer's Hello (as far as
// it was learnt). A worker that learns its rank from rank 0 passes a
// self with Ranks and Rank zero: it takes the rank rank 0 states. A failed
// handshake is a *PeerError naming the peer; the listener stays usable, so
// a worker calls Accept again. An error that
// wraps ErrClosed or the context's error means the listener is done.
// Accept is not for concurrent use.
func (l *Listener) Accept(ctx context.Context, self Hello) (*Conn, Hello, error) {
	learn := self.Ranks == 0 && self.Rank == 0 // takes rank 0's
	if learn {
		self.Ranks, self.Rank = 2, 1 // checked with rank 0's Hello
	}
	self, err := self.check()
	if err != nil {
		return nil, Hello{}, err
	}
	if learn {
		self.Ranks, self.Rank = 0, 0
	}
	dl, _ := l.ln.(interface{ SetDeadline(time.Time) error })
	if dl != nil {
		dl.SetDeadline(time.Time{})
		stop := context.AfterFunc(ctx, func() { dl.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	nc, err := l.ln.Accept()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, Hello{}, fmt.Errorf("link: accept on %s: %w", l.Addr(), ctx.Err())
		case errors.Is(err, net.ErrClosed):
			return nil, Hello{}, fmt.Errorf("link: accept on %s: %w: %w", l.Addr(), ErrClosed, err)
		}
		return nil, Hello{}, fmt.Errorf("link: accept on %s: %w", l.Addr(), err)
	}
	if l.cfg.TLS != nil {
		nc = tls.Server(nc, l.cfg.TLS)
	}
	c := newConn(nc, 0, nc.RemoteAddr().String(), l.cfg)
	hctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	var peer Hello
	err = c.handshake(ctx, hctx, l.cfg, func(hs *handshake) (err error) {
		peer, err = hs.accept(self)
		return err
	})
	if err != nil {
		c.Close()
		return nil, peer, &PeerError{Rank: 0, Addr: c.addr, Op: "handshake", Err: err}
	}
	return c, peer, nil
}

// handshake is one side's state during the handshake.
type handshake struct {
	c   *Conn
	key []byte
}

// handshake runs the TLS handshake (if any) and then run, bounded by
// hctx's deadline and cancelled with ctx.
func (c *Conn) handshake(ctx, hctx context.Context, cfg Config, run func(*handshake) error) error {
	deadline, _ := hctx.Deadline()
	c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	err := func() error {
		if tc, ok := c.nc.(*tls.Conn); ok {
			if err := tc.HandshakeContext(hctx); err != nil {
				if hctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
					return err // a timeout or cancellation, classified below
				}
				return fmt.Errorf("%w: TLS: %w", ErrRefused, err)
			}
		}
		return run(&handshake{c: c, key: cfg.Key})
	}()
	if err != nil {
		return ctxError(ctx, hctx, err, cfg.Timeout)
	}
	return c.nc.SetDeadline(time.Time{})
}

// ctxError classifies a handshake's error: a refusal or protocol error as
// it is, the error of a cancelled ctx as that, a deadline as ErrTimeout.
func ctxError(ctx, hctx context.Context, err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, ErrRefused), errors.Is(err, ErrProtocol):
		return err
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	case hctx.Err() != nil, errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w after %v: %w", ErrTimeout, timeout, err)
	}
	return classify(err, timeout)
}

func (hs *handshake) send(kind uint8, parts ...[]byte) error {
	var payload []byte
	for _, p := range parts {
		payload = append(payload, p...)
	}
	_, err := hs.c.nc.Write(appendFrame(nil, kind, payload))
	return err
}

// recv reads a handshake frame of the kind wanted, or a refusal, which it
// returns as ErrRefused with the peer's reason.
func (hs *handshake) recv(want uint8) ([]byte, error) {
	kind, payload, err := hs.c.fr.read(nil, handshakeMaxFrame)
	switch {
	case err != nil:
		return nil, err // classified by ctxError
	case kind == kindRefuse:
		return nil, fmt.Errorf("%w: %s", ErrRefused, printable(payload))
	case kind != want:
		return nil, fmt.Errorf("%w: handshake frame %#02x, want %#02x", ErrProtocol, kind, want)
	}
	return payload, nil
}

// refuse tells the peer why (best effort) and returns the refusal.
func (hs *handshake) refuse(reason string) error {
	hs.send(kindRefuse, []byte(reason))
	return fmt.Errorf("%w: %s", ErrRefused, reason)
}

// dial is rank 0's side of the handshake (see the package doc).
func (hs *handshake) dial(self Hello) error {
	n0 := make([]byte, nonceLen)
	rand.Read(n0)
	if err := hs.send(kindNonce, n0); err != nil {
		return err
	}
	p, err := hs.recv(kindNonce)
	if err != nil {
		return err
	}
	if len(p) != nonceLen+tagLen {
		return fmt.Errorf("%w: worker's nonce frame of %d bytes", ErrProtocol, len(p))
	}
	nw, tagW := p[:nonceLen], p[nonceLen:]
	if !hmac.Equal(tagW, mac(hs.key, "worker key", n0, nw)) {
		return hs.refuse(wrongKey)
	}
	h0 := self.marshal()
	if err := hs.send(kindHello, mac(hs.key, "rank 0 hello", n0, nw, h0), h0); err != nil {
		return err
	}
	p, err = hs.recv(kindVerdict)
	if err != nil {
		return err
	}
	if len(p) < tagLen+3 || !hmac.Equal(p[:tagLen], mac(hs.key, "worker verdict", n0, nw, h0, p[tagLen:])) {
		return fmt.Errorf("%w: the worker's verdict fails its tag", ErrProtocol)
	}
	v := p[tagLen:]
	accepted, hwLen := v[0] == 1, int(binary.BigEndian.Uint16(v[1:3]))
	if len(v)-3 < hwLen {
		return fmt.Errorf("%w: short verdict", ErrProtocol)
	}
	hw, err := unmarshalHello(v[3 : 3+hwLen])
	if err != nil {
		return err
	}
	if !accepted {
		return fmt.Errorf("worker rank %d %w: %s", hw.Rank, ErrRefused, printable(v[3+hwLen:]))
	}
	if d := diff(hw, self); d != "" {
		hs.send(kindRefuse, []byte("rank 0 refused: "+d))
		return fmt.Errorf("rank 0 %w worker rank %d: %s", ErrRefused, hw.Rank, d)
	}
	return nil
}

// accept is the worker's side of the handshake; it returns rank 0's Hello
// once rank 0 has proven the key.
func (hs *handshake) accept(self Hello) (Hello, error) {
	n0, err := hs.recv(kindNonce)
	if err != nil {
		return Hello{}, err
	}
	if len(n0) != nonceLen {
		return Hello{}, fmt.Errorf("%w: rank 0's nonce frame of %d bytes", ErrProtocol, len(n0))
	}
	nw := make([]byte, nonceLen)
	rand.Read(nw)
	if err := hs.send(kindNonce, nw, mac(hs.key, "worker key", n0, nw)); err != nil {
		return Hello{}, err
	}
	p, err := hs.recv(kindHello)
	if err != nil {
		return Hello{}, err
	}
	if len(p) < tagLen || !hmac.Equal(p[:tagLen], mac(hs.key, "rank 0 hello", n0, nw, p[tagLen:])) {
		return Hello{}, hs.refuse(wrongKey)
	}
	h0, err := unmarshalHello(p[tagLen:])
	if err != nil {
		return Hello{}, err
	}
	if self.Ranks == 0 && self.Rank == 0 {
		// A worker that learns its rank from rank 0 (Accept's self with
		// no rank) takes the rank 0 states, once it is a valid one.
		if h0.Ranks < 2 || h0.Rank < 1 || h0.Rank >= h0.Ranks {
			return h0, hs.refuse(fmt.Sprintf("rank 0 states rank %d of %d ranks", h0.Rank, h0.Ranks))
		}
		self.Ranks, self.Rank = h0.Ranks, h0.Rank
	}
	d := diff(self, h0)
	hw := self.marshal()
	v := []byte{0}
	if d == "" {
		v[0] = 1
	}
	v = binary.BigEndian.AppendUint16(v, uint16(len(hw)))
	v = append(append(v, hw...), d...)
	if err := hs.send(kindVerdict, mac(hs.key, "worker verdict", n0, nw, p[tagLen:], v), v); err != nil {
		return h0, err
	}
	if d != "" {
		return h0, fmt.Errorf("%w: %s", ErrRefused, d)
	}
	return h0, nil
}
