package link

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// coalesceMax is the largest frame Send copies into one buffer (one TLS
// record, one write); larger frames go out as the caller's buffers
// (writev on TCP).
const coalesceMax = 16 << 10

// Conn is an established, authenticated link to one peer. One goroutine
// may Send while another Receives; Close may be called from any goroutine
// and makes a blocked Send or Recv return ErrClosed.
type Conn struct {
	nc      net.Conn
	rank    int    // the peer's rank
	addr    string // the peer's address
	peer    string // Peer(), formatted once
	max     int
	timeout atomic.Int64 // nanoseconds; 0: no bound

	sendMu  sync.Mutex
	hdr     [headerLen]byte
	vec     [][]byte    // the header and the caller's parts, reused
	wbufs   net.Buffers // what is left to write of vec
	scratch []byte      // a small frame, coalesced

	recvMu sync.Mutex
	br     *bufio.Reader
	fr     frameReader

	brokenMu  sync.Mutex
	broken    error // the first failure; the Conn is closed since
	closeOnce sync.Once
	closeErr  error
}

func newConn(nc net.Conn, rank int, addr string, cfg Config) *Conn {
	c := &Conn{nc: nc, rank: rank, addr: addr, max: cfg.MaxFrame}
	c.peer = fmt.Sprintf("rank %d (%s)", rank, addr)
	c.timeout.Store(int64(cfg.Timeout))
	c.br = bufio.NewReaderSize(nc, 64<<10)
	c.fr.r = c.br
	return c
}

// Peer names the peer: "rank 2 (10.0.0.3:7071)".
func (c *Conn) Peer() string { return c.peer }

// SetTimeout sets the bound on each later Send and Recv; d <= 0 removes
// it (a worker waiting for work should rather use Await).
func (c *Conn) SetTimeout(d time.Duration) { c.timeout.Store(int64(max(d, 0))) }

// Close closes the connection; a blocked Send or Recv returns ErrClosed.
// Closing twice is harmless.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.nc.Close() })
	return c.closeErr
}

// Send writes one frame of kind whose payload is parts, concatenated on
// the wire (large parts are not copied). Kinds 0xF0 and above belong to
// the handshake and are refused. The whole frame must be written within
// the timeout; on any failure the Conn is closed.
func (c *Conn) Send(kind uint8, parts ...[]byte) error {
	if kind >= firstKindReserved {
		return c.errorf("send", "%w: kind %#02x is reserved for the handshake", ErrProtocol, kind)
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > c.max {
		return c.errorf("send", "%w: frame of %d bytes exceeds the limit of %d", ErrProtocol, n, c.max)
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.brokenErr("send"); err != nil {
		return err
	}
	crc := uint32(0)
	for _, p := range parts {
		crc = crc32.Update(crc, castagnoli, p)
	}
	putHeader(&c.hdr, kind, n, crc)
	if err := c.nc.SetWriteDeadline(c.deadline()); err != nil {
		return c.fail("send", err)
	}
	var err error
	if n <= coalesceMax {
		c.scratch = append(c.scratch[:0], c.hdr[:]...)
		for _, p := range parts {
			c.scratch = append(c.scratch, p...)
		}
		_, err = c.nc.Write(c.scratch)
	} else {
		c.vec = append(append(c.vec[:0], c.hdr[:]), parts...)
		c.wbufs = c.vec
		_, err = c.wbufs.WriteTo(c.nc)
		clear(c.vec) // keep no reference to the caller's buffers
	}
	if err != nil {
		return c.fail("send", err)
	}
	return nil
}

// Recv reads one frame within the timeout and returns its kind and
// payload. The payload is read into dst when it is large enough, else into
// a new buffer grown as the bytes arrive (never past MaxFrame); passing
// the last payload back as dst makes a warm Recv allocate nothing. The
// payload stays valid until that buffer is reused. On any failure the
// Conn is closed.
func (c *Conn) Recv(dst []byte) (kind uint8, payload []byte, err error) {
	return c.recv(dst, false)
}

// Await is Recv for a worker waiting for its next round: it waits as long
// as it takes for a frame to begin (until the peer closes, or Close), then
// reads the frame within the timeout like Recv.
func (c *Conn) Await(dst []byte) (kind uint8, payload []byte, err error) {
	return c.recv(dst, true)
}

func (c *Conn) recv(dst []byte, wait bool) (uint8, []byte, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	if err := c.brokenErr("recv"); err != nil {
		return 0, nil, err
	}
	if wait {
		if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
			return 0, nil, c.fail("recv", err)
		}
		if _, err := c.br.Peek(1); err != nil {
			return 0, nil, c.fail("recv", err)
		}
	}
	if err := c.nc.SetReadDeadline(c.deadline()); err != nil {
		return 0, nil, c.fail("recv", err)
	}
	kind, payload, err := c.fr.read(dst, c.max)
	if err != nil {
		return 0, nil, c.fail("recv", err)
	}
	if kind == kindRefuse {
		return 0, nil, c.fail("recv", fmt.Errorf("%w: %s", ErrRefused, printable(payload)))
	}
	if kind >= firstKindReserved {
		return 0, nil, c.fail("recv", fmt.Errorf("%w: unexpected handshake frame %#02x", ErrProtocol, kind))
	}
	return kind, payload, nil
}

// deadline is now plus the timeout, or none.
func (c *Conn) deadline() time.Time {
	d := time.Duration(c.timeout.Load())
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// errorf is a *PeerError for op that does not break the Conn.
func (c *Conn) errorf(op, format string, args ...any) error {
	return &PeerError{Rank: c.rank, Addr: c.addr, Op: op, Err: fmt.Errorf(format, args...)}
}

// fail records the first failure, closes the Conn and returns err
// classified and named after the peer.
func (c *Conn) fail(op string, err error) error {
	err = classify(err, time.Duration(c.timeout.Load()))
	c.brokenMu.Lock()
	if c.broken == nil {
		c.broken = err
	}
	c.brokenMu.Unlock()
	c.Close()
	return &PeerError{Rank: c.rank, Addr: c.addr, Op: op, Err: err}
}

// brokenErr returns the error for op on a Conn broken by an earlier
// failure, or nil.
func (c *Conn) brokenErr(op string) error {
	c.brokenMu.Lock()
	defer c.brokenMu.Unlock()
	if c.broken == nil {
		return nil
	}
	return &PeerError{Rank: c.rank, Addr: c.addr, Op: op, Err: fmt.Errorf("%w after an earlier failure: %w", ErrClosed, c.broken)}
}

// classify wraps an I/O error with the sentinel it amounts to.
func classify(err error, timeout time.Duration) error {
	var op *net.OpError
	switch {
	case errors.Is(err, ErrProtocol), errors.Is(err, ErrRefused), errors.Is(err, ErrTimeout), errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w after %v: %w", ErrTimeout, timeout, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w by the peer", ErrClosed)
	case errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("%w by TLS: %w", ErrRefused, err)
	}
	var rec tls.RecordHeaderError
	if errors.As(err, &rec) {
		return fmt.Errorf("%w: TLS: %w", ErrProtocol, err)
	}
	return err
}

// printable bounds and cleans a peer's text for an error message.
func printable(b []byte) string {
	if len(b) > 4096 {
		b = b[:4096]
	}
	r := []rune(string(b))
	for i, x := range r {
		if x < ' ' || x == 0x7f || x == 0xFFFD {
			r[i] = '?'
		}
	}
	return string(r)
}
