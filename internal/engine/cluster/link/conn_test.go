package link

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wantPeerError checks that err is a *PeerError naming c's peer and wraps
// every one of sentinels.
func wantPeerError(t *testing.T, err error, c *Conn, sentinels ...error) {
	t.Helper()
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != c.rank || pe.Addr != c.addr || !strings.HasPrefix(err.Error(), c.Peer()+": ") {
		t.Fatalf("error %v does not name %s", err, c.Peer())
	}
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			t.Fatalf("error %v does not wrap %v", err, s)
		}
	}
}

func TestRecvHungWorker(t *testing.T) {
	c, _ := connected(t, testConfig(), testConfig())
	c.SetTimeout(100 * time.Millisecond)
	if err := c.Send(1, []byte("round")); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Recv(nil)
	wantPeerError(t, err, c, ErrTimeout)
	// The link is broken now: the stream may be out of step.
	wantPeerError(t, c.Send(1, nil), c, ErrClosed, ErrTimeout)
}

// TestSendHungWorker: a worker that stops reading fails a large Send
// with ErrTimeout once the socket buffers are full.
func TestSendHungWorker(t *testing.T) {
	c, _ := connected(t, testConfig(), testConfig())
	c.SetTimeout(100 * time.Millisecond)
	err := c.Send(1, make([]byte, 64<<20))
	wantPeerError(t, err, c, ErrTimeout)
}

// rawWorker returns rank 0's end of a link and the worker's raw socket,
// on which a test writes what it likes.
func rawWorker(t *testing.T) (*Conn, *net.TCPConn) {
	c, w := connected(t, testConfig(), testConfig())
	c.SetTimeout(200 * time.Millisecond)
	return c, w.nc.(*net.TCPConn)
}

func TestRecvFaults(t *testing.T) {
	frame := appendFrame(nil, 5, bytes.Repeat([]byte("rows "), 1000))
	t.Run("stalls mid-frame", func(t *testing.T) {
		c, w := rawWorker(t)
		w.Write(frame[:len(frame)/2])
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c, ErrTimeout)
	})
	t.Run("truncated", func(t *testing.T) {
		c, w := rawWorker(t)
		w.Write(frame[:len(frame)/2])
		w.CloseWrite()
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c, ErrProtocol, io.ErrUnexpectedEOF)
	})
	t.Run("killed mid-frame", func(t *testing.T) {
		c, w := rawWorker(t)
		w.Write(frame[:len(frame)/2])
		w.SetLinger(0) // close with a reset, as a killed process's socket can
		w.Close()
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c)
		if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrProtocol) {
			t.Fatalf("error %v: neither ErrClosed nor ErrProtocol", err)
		}
	})
	t.Run("closed between frames", func(t *testing.T) {
		c, w := rawWorker(t)
		w.Close()
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c, ErrClosed)
	})
	t.Run("corrupted payload", func(t *testing.T) {
		c, w := rawWorker(t)
		bad := bytes.Clone(frame)
		bad[len(bad)-3] ^= 0x10
		w.Write(bad)
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c, ErrProtocol)
		if !strings.Contains(err.Error(), "payload CRC") {
			t.Fatalf("error %v does not say the payload CRC failed", err)
		}
	})
	t.Run("handshake frame after the handshake", func(t *testing.T) {
		c, w := rawWorker(t)
		w.Write(appendFrame(nil, kindNonce, make([]byte, nonceLen)))
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c, ErrProtocol)
	})
	t.Run("refusal", func(t *testing.T) {
		c, w := rawWorker(t)
		w.Write(appendFrame(nil, kindRefuse, []byte("rank 0 refused: kernels differ")))
		_, _, err := c.Recv(nil)
		wantPeerError(t, err, c, ErrRefused)
	})
}

// TestRecvHugeClaims: a header claiming 2^40 bytes is refused before any
// payload is allocated; one that claims the whole limit (1 GiB) and sends
// 100 bytes allocates about what arrived.
func TestRecvHugeClaims(t *testing.T) {
	for _, c := range []struct {
		claim uint64
		sent  int
		want  error
	}{
		{1 << 40, 0, ErrProtocol},
		{DefaultMaxFrame, 100, io.ErrUnexpectedEOF},
	} {
		t.Run(strconv.FormatUint(c.claim, 10), func(t *testing.T) {
			conn, w := rawWorker(t)
			w.Write(append(hugeClaim(c.claim), make([]byte, c.sent)...))
			w.CloseWrite()
			var err error
			allocated := allocatedBy(func() { _, _, err = conn.Recv(nil) })
			wantPeerError(t, err, conn, ErrProtocol, c.want)
			if allocated > 4<<20 {
				t.Errorf("a claim of %d bytes (%d sent) allocated %d bytes", c.claim, c.sent, allocated)
			}
		})
	}
}

func TestSendRefusesReservedKindAndOversize(t *testing.T) {
	cfg := testConfig()
	cfg.MaxFrame = 1000
	c, w := connected(t, cfg, cfg)
	if err := c.Send(kindNonce, nil); !errors.Is(err, ErrProtocol) {
		t.Errorf("Send of a handshake kind: %v", err)
	}
	if err := c.Send(1, make([]byte, 600), make([]byte, 401)); !errors.Is(err, ErrProtocol) {
		t.Errorf("Send of 1001 bytes with MaxFrame 1000: %v", err)
	}
	roundTrip(t, c, w, make([]byte, 1000)) // neither broke the link
}

// echo returns every frame to its sender until the link fails.
func echo(c *Conn) {
	var buf []byte
	for {
		kind, p, err := c.Await(buf)
		if err != nil || c.Send(kind, p) != nil {
			return
		}
		buf = p
	}
}

// TestLargePayloads: 30 MiB in three parts, out and back, intact.
func TestLargePayloads(t *testing.T) {
	c, w := connected(t, testConfig(), testConfig())
	go echo(w)
	parts := make([][]byte, 3)
	rng := rand.NewChaCha8([32]byte{1})
	for i := range parts {
		parts[i] = make([]byte, 10<<20+i)
		rng.Read(parts[i])
	}
	if err := c.Send(9, parts...); err != nil {
		t.Fatal(err)
	}
	kind, got, err := c.Recv(nil)
	if err != nil || kind != 9 || !bytes.Equal(got, bytes.Join(parts, nil)) {
		t.Fatalf("30 MiB echoed: kind %d, %d bytes, %v; intact %v", kind, len(got), err, bytes.Equal(got, bytes.Join(parts, nil)))
	}
}

// TestAwaitOutlastsTimeout: a worker waiting for its next round is not
// timed out however long rank 0 takes to send it.
func TestAwaitOutlastsTimeout(t *testing.T) {
	c, w := connected(t, testConfig(), testConfig())
	w.SetTimeout(20 * time.Millisecond)
	got := make(chan error, 1)
	go func() {
		_, p, err := w.Await(nil)
		if err == nil && string(p) != "late round" {
			err = fmt.Errorf("received %q", p)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // setup, not an assertion: rank 0 idles past the worker's timeout
	if err := c.Send(1, []byte("late round")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Await after an idle spell: %v", err)
	}
	c.Close()
	_, _, err := w.Await(nil)
	wantPeerError(t, err, w, ErrClosed)
}

// TestCloseUnblocksRecv: Close from another goroutine ends a blocked
// Await with ErrClosed.
func TestCloseUnblocksRecv(t *testing.T) {
	_, w := connected(t, testConfig(), testConfig())
	got := make(chan error, 1)
	go func() { _, _, err := w.Await(nil); got <- err }()
	w.Close()
	err := <-got
	wantPeerError(t, err, w, ErrClosed)
	if w.Close() != nil {
		t.Error("a second Close failed")
	}
}

// TestRoundTripAllocatesNothing: once warm, a round trip (Send, the
// worker's Await and Send, Recv) allocates nothing on either side.
func TestRoundTripAllocatesNothing(t *testing.T) {
	for _, size := range []int{256, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c, w := connected(t, testConfig(), testConfig())
			go echo(w)
			in, out := make([]byte, size/2), make([]byte, size-size/2)
			var buf []byte
			trip := func() {
				var err error
				if err = c.Send(3, in, out); err == nil {
					_, buf, err = c.Recv(buf)
				}
				if err != nil || len(buf) != size {
					t.Fatalf("round trip: %d bytes, %v", len(buf), err)
				}
			}
			trip()
			if allocs := testing.AllocsPerRun(50, trip); allocs != 0 {
				t.Errorf("%v allocations per round trip of %d bytes, want 0", allocs, size)
			}
		})
	}
}

// BenchmarkRoundTrip measures a round trip to an echoing worker on
// loopback: Send of the payload, the worker's Await and Send back, Recv;
// over TCP and over mutual TLS. "raw" is the baseline in the same process:
// the same bytes echoed over a plain TCP connection with no frames, CRCs,
// deadlines or handshake.
func BenchmarkRoundTrip(b *testing.B) {
	dir := b.TempDir()
	ca, wcert, wkey, ccert, ckey := certs(b, dir, "bench")
	for _, transport := range []string{"raw", "tcp", "tls"} {
		for _, size := range []int{256, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dB", transport, size), func(b *testing.B) {
				payload, buf := make([]byte, size), make([]byte, size)
				var trip func() error
				if transport == "raw" {
					c, w := rawPair(b)
					go func() {
						buf := make([]byte, size)
						for {
							if _, err := io.ReadFull(w, buf); err != nil {
								return
							}
							if _, err := w.Write(buf); err != nil {
								return
							}
						}
					}()
					trip = func() error {
						if _, err := c.Write(payload); err != nil {
							return err
						}
						_, err := io.ReadFull(c, buf)
						return err
					}
				} else {
					wcfg, ccfg := testConfig(), testConfig()
					if transport == "tls" {
						wcfg, ccfg = tlsConfigs(b, ca, wcert, wkey, ccert, ckey)
					}
					c, w := connected(b, wcfg, ccfg)
					go echo(w)
					trip = func() (err error) {
						if err = c.Send(3, payload); err == nil {
							_, buf, err = c.Recv(buf)
						}
						return err
					}
				}
				b.SetBytes(int64(2 * size))
				b.ReportAllocs()
				for b.Loop() {
					if err := trip(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/roundtrip")
			})
		}
	}
}

// rawPair is a plain TCP connection on loopback, both ends.
func rawPair(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	w, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); w.Close() })
	return c, w
}

// TestStandardLibraryOnly: the transport and its tests import only the
// standard library (the layering test checks the module's own packages).
func TestStandardLibraryOnly(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && path != "github.com/k3go/k3/internal/engine/cluster/link" {
				t.Errorf("%s imports %s, not from the standard library", name, path)
			}
		}
	}
	if len(files) < 5 {
		t.Fatalf("found %d files", len(files))
	}
}
