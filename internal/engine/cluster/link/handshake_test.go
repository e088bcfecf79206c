package link

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testKey is the cluster key of the tests.
var testKey = []byte("k3-link-test-key-0123456789")

// testConfig is generous with time: the machine is shared and loaded.
func testConfig() Config { return Config{Key: testKey, Timeout: 20 * time.Second} }

func workerHello() Hello {
	return Hello{Version: "k3 test", Fingerprint: "fp-worker", Kernels: "avx2/avx2", Ranks: 2, Rank: 1}
}

// accepted is what a worker's Accept returned.
type accepted struct {
	c    *Conn
	peer Hello
	err  error
}

// link starts a worker on 127.0.0.1 with wcfg and self, dials it with
// ccfg and hello, and returns both ends (closed at the end of the test).
func link(t testing.TB, wcfg, ccfg Config, self, hello Hello) (*Conn, accepted, error) {
	t.Helper()
	l, err := Listen("127.0.0.1:0", wcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	done := make(chan accepted, 1)
	go func() {
		c, h, err := l.Accept(context.Background(), self)
		done <- accepted{c, h, err}
	}()
	c, err := Dial(context.Background(), l.Addr().String(), ccfg, hello)
	a := <-done
	for _, c := range []*Conn{c, a.c} {
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return c, a, err
}

// connected is link for tests that need the handshake to succeed.
func connected(t testing.TB, wcfg, ccfg Config) (rank0, worker *Conn) {
	t.Helper()
	c, a, err := link(t, wcfg, ccfg, workerHello(), workerHello())
	if err != nil || a.err != nil {
		t.Fatalf("handshake: dial %v; accept %v", err, a.err)
	}
	return c, a.c
}

func TestHandshakeOK(t *testing.T) {
	c, a, err := link(t, testConfig(), testConfig(), workerHello(), workerHello())
	if err != nil || a.err != nil {
		t.Fatalf("dial: %v; accept: %v", err, a.err)
	}
	want := workerHello()
	want.Protocol = Protocol
	if a.peer != want {
		t.Errorf("the worker saw %+v, want %+v", a.peer, want)
	}
	if p := c.Peer(); !strings.HasPrefix(p, "rank 1 (127.0.0.1:") {
		t.Errorf("rank 0's Peer() = %q", p)
	}
	if p := a.c.Peer(); !strings.HasPrefix(p, "rank 0 (127.0.0.1:") {
		t.Errorf("the worker's Peer() = %q", p)
	}
	roundTrip(t, c, a.c, []byte("activations"))
}

// roundTrip sends payload each way between a and b and checks it arrives.
func roundTrip(t *testing.T, a, b *Conn, payload []byte) {
	t.Helper()
	for _, d := range [][2]*Conn{{a, b}, {b, a}} {
		if err := d[0].Send(7, payload); err != nil {
			t.Fatal(err)
		}
		kind, got, err := d[1].Recv(nil)
		if err != nil || kind != 7 || string(got) != string(payload) {
			t.Fatalf("%s received kind %d %q, %v; want 7 %q", d[1].Peer(), kind, got, err, payload)
		}
	}
}

func TestHandshakeRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Hello)
		why  string
	}{
		{"fingerprint", func(h *Hello) { h.Fingerprint = "fp-rank0" }, `checkpoint fingerprint differs: worker "fp-worker", rank 0 "fp-rank0"`},
		{"kernels", func(h *Hello) { h.Kernels = "avx512/avx512" }, `kernels differ: worker "avx2/avx2", rank 0 "avx512/avx512"`},
		{"version", func(h *Hello) { h.Version = "k3 other" }, `k3 version differs: worker "k3 test", rank 0 "k3 other"`},
		{"ranks", func(h *Hello) { h.Ranks = 3 }, `cluster size differs: worker 2 ranks, rank 0 3 ranks`},
		{"rank", func(h *Hello) { h.Ranks, h.Rank = 3, 2 }, `rank differs: worker is rank 1, rank 0 expects rank 2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			self := workerHello()
			if c.name == "rank" {
				self.Ranks = 3
			}
			hello := self
			c.edit(&hello)
			conn, a, err := link(t, testConfig(), testConfig(), self, hello)
			if conn != nil || a.c != nil {
				t.Fatal("a link was established")
			}
			var pe *PeerError
			if !errors.Is(err, ErrRefused) || !errors.As(err, &pe) || pe.Rank != hello.Rank ||
				!strings.Contains(err.Error(), "worker rank 1 refused: "+c.why) {
				t.Errorf("rank 0: %v\nwant ErrRefused from rank %d with %q", err, hello.Rank, c.why)
			}
			if !errors.Is(a.err, ErrRefused) || !errors.As(a.err, &pe) || pe.Rank != 0 ||
				!strings.Contains(a.err.Error(), "refused: "+c.why) {
				t.Errorf("worker: %v\nwant ErrRefused from rank 0 with %q", a.err, c.why)
			}
			hello.Protocol = Protocol
			if a.peer != hello {
				t.Errorf("the worker returned rank 0's Hello as %+v, want %+v", a.peer, hello)
			}
		})
	}
}

// TestHandshakeLearnsRank: a worker started without a rank (Ranks and
// Rank zero) takes the one rank 0 states, and still refuses a Hello that
// differs in anything else.
func TestHandshakeLearnsRank(t *testing.T) {
	self := workerHello()
	self.Ranks, self.Rank = 0, 0
	hello := workerHello()
	hello.Ranks, hello.Rank = 3, 2
	c, a, err := link(t, testConfig(), testConfig(), self, hello)
	if err != nil || a.err != nil || a.peer.Ranks != 3 || a.peer.Rank != 2 {
		t.Fatalf("dial %v; accept %v, rank 0's Hello %+v", err, a.err, a.peer)
	}
	roundTrip(t, c, a.c, []byte("rows"))
	hello.Kernels = "avx512/avx512"
	if _, _, err = link(t, testConfig(), testConfig(), self, hello); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "worker rank 2 refused: kernels differ") {
		t.Errorf("a worker learning its rank, other kernels: %v", err)
	}
}

func TestHandshakeWrongKey(t *testing.T) {
	other := testConfig()
	other.Key = []byte("another-cluster-key-0123456789")
	c, a, err := link(t, testConfig(), other, workerHello(), workerHello())
	if c != nil || a.c != nil {
		t.Fatal("a link was established")
	}
	for side, err := range map[string]error{"rank 0": err, "worker": a.err} {
		if !errors.Is(err, ErrRefused) || !strings.HasSuffix(err.Error(), "refused: wrong cluster key") {
			t.Errorf("%s: %v, want ErrRefused: wrong cluster key", side, err)
		}
		if strings.Contains(err.Error(), "fp-worker") || strings.Contains(err.Error(), "avx2") {
			t.Errorf("%s: %v reveals a Hello", side, err)
		}
	}
	if a.peer != (Hello{}) {
		t.Errorf("rank 0 revealed its Hello to a worker without the key: %+v", a.peer)
	}
}

// rawHandshake plays rank 0 by hand against a worker: it sends a nonce,
// then sent as its Hello with the tag made by tag from both nonces. It
// returns the worker's reply frame and the worker's Accept result.
func rawHandshake(t *testing.T, tag func(n0, nw []byte) []byte, sent []byte) (uint8, []byte, accepted) {
	t.Helper()
	l, err := Listen("127.0.0.1:0", testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan accepted, 1)
	go func() {
		c, h, err := l.Accept(context.Background(), workerHello())
		done <- accepted{c, h, err}
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fr := frameReader{r: nc}
	n0 := make([]byte, nonceLen)
	rand.Read(n0)
	nc.Write(appendFrame(nil, kindNonce, n0))
	_, p, err := fr.read(nil, 1<<16)
	if err != nil || len(p) != nonceLen+tagLen {
		t.Fatalf("the worker's nonce: %d bytes, %v", len(p), err)
	}
	nc.Write(appendFrame(nil, kindHello, append(tag(n0, p[:nonceLen]), sent...)))
	kind, reply, err := fr.read(nil, 1<<16)
	if err != nil {
		t.Fatalf("the worker's reply: %v", err)
	}
	return kind, reply, <-done
}

// TestHandshakeTagBindsHello: a Hello altered after its tag was made, a
// tag replayed from another session, or one made without the key, is
// refused as the wrong key.
func TestHandshakeTagBindsHello(t *testing.T) {
	h := workerHello()
	h.Protocol = Protocol
	good := h.marshal()
	tampered := h
	tampered.Fingerprint = "fp-workes"
	earlier := make([]byte, nonceLen) // the worker's nonce of another session
	cases := map[string]struct {
		tag  func(n0, nw []byte) []byte
		sent []byte
	}{
		"tampered Hello": {func(n0, nw []byte) []byte { return mac(testKey, "rank 0 hello", n0, nw, good) }, tampered.marshal()},
		"replayed tag":   {func(n0, nw []byte) []byte { return mac(testKey, "rank 0 hello", n0, earlier, good) }, good},
		"no key": {func(n0, nw []byte) []byte {
			return mac([]byte("guessed-key-guessed-key"), "rank 0 hello", n0, nw, good)
		}, good},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			kind, reply, a := rawHandshake(t, c.tag, c.sent)
			if kind != kindRefuse || string(reply) != wrongKey {
				t.Errorf("the worker replied kind %#x %q, want a refusal %q", kind, reply, wrongKey)
			}
			if !errors.Is(a.err, ErrRefused) || !strings.HasSuffix(a.err.Error(), "refused: "+wrongKey) || a.c != nil {
				t.Errorf("Accept: %v", a.err)
			}
		})
	}
	// The control: the same hand-made handshake, honest, is accepted.
	kind, _, a := rawHandshake(t, func(n0, nw []byte) []byte { return mac(testKey, "rank 0 hello", n0, nw, good) }, good)
	if kind != kindVerdict || a.err != nil {
		t.Fatalf("an honest hand-made handshake: reply %#x, Accept %v", kind, a.err)
	}
	a.c.Close()
}

// TestDialHungWorker: a worker that accepts the connection and never
// answers fails Dial with ErrTimeout naming it.
func TestDialHungWorker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			held <- c
		}
	}()
	cfg := testConfig()
	cfg.Timeout = 200 * time.Millisecond
	_, err = Dial(context.Background(), ln.Addr().String(), cfg, workerHello())
	var pe *PeerError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &pe) || pe.Rank != 1 || pe.Addr != ln.Addr().String() || pe.Op != "handshake" {
		t.Fatalf("Dial to a worker that never answers: %v, want ErrTimeout naming rank 1", err)
	}
	(<-held).Close()
}

// TestAcceptHungRank0: a peer that connects and says nothing fails the
// worker's Accept with ErrTimeout, and the listener stays usable.
func TestAcceptHungRank0(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 200 * time.Millisecond
	l, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, _, err = l.Accept(context.Background(), workerHello())
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 0 ("+nc.LocalAddr().String()+")") {
		t.Fatalf("Accept of a silent peer: %v, want ErrTimeout naming it", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err = l.Accept(ctx, workerHello()); !errors.Is(err, context.Canceled) {
		t.Errorf("Accept with a cancelled context: %v", err)
	}
	l.Close()
	if _, _, err = l.Accept(context.Background(), workerHello()); !errors.Is(err, ErrClosed) {
		t.Errorf("Accept on a closed listener: %v", err)
	}
}

func TestBadConfigAndHello(t *testing.T) {
	if _, err := Listen("127.0.0.1:0", Config{Key: []byte("short")}); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a 5-byte key: %v", err)
	}
	bad := workerHello()
	bad.Rank = 2
	if _, err := Dial(context.Background(), "127.0.0.1:1", testConfig(), bad); err == nil || !strings.Contains(err.Error(), "rank 2 of 2") {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

// certs writes a CA, a worker certificate for 127.0.0.1 and a rank 0
// client certificate, all signed by the CA, into dir; it returns the
// paths: ca, worker cert, worker key, client cert, client key.
func certs(t testing.TB, dir, name string) (ca, wcert, wkey, ccert, ckey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(file, kind string, der []byte) string {
		path := filepath.Join(dir, name+"-"+file)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, file string) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: file},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		return write(file+".crt", "CERTIFICATE", der), write(file+".key", "PRIVATE KEY", kder)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER)
	wcert, wkey = leaf(2, x509.ExtKeyUsageServerAuth, "worker")
	ccert, ckey = leaf(3, x509.ExtKeyUsageClientAuth, "rank0")
	return
}

// tlsConfigs returns the worker's and rank 0's Config over mutual TLS.
func tlsConfigs(t testing.TB, ca, wcert, wkey, ccert, ckey string) (Config, Config) {
	t.Helper()
	w, c := testConfig(), testConfig()
	var err error
	if w.TLS, err = TLSConfig(wcert, wkey, ca, true); err != nil {
		t.Fatal(err)
	}
	if c.TLS, err = TLSConfig(ccert, ckey, ca, false); err != nil {
		t.Fatal(err)
	}
	return w, c
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, wcert, wkey, ccert, ckey := certs(t, dir, "cluster")
	wcfg, ccfg := tlsConfigs(t, ca, wcert, wkey, ccert, ckey)

	t.Run("ok", func(t *testing.T) {
		c, w := connected(t, wcfg, ccfg)
		if _, ok := c.nc.(*tls.Conn); !ok {
			t.Fatal("rank 0's link is not over TLS")
		}
		roundTrip(t, c, w, make([]byte, 100_000))
	})
	t.Run("client without a certificate", func(t *testing.T) {
		nocert, err := TLSConfig("", "", ca, false)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.TLS = nocert
		c, a, err := link(t, wcfg, cfg, workerHello(), workerHello())
		if c != nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("rank 0 without a certificate: %v, want ErrRefused over the certificate", err)
		}
		if !errors.Is(a.err, ErrRefused) || !strings.Contains(a.err.Error(), "certificate") {
			t.Errorf("worker: %v, want ErrRefused over the certificate", a.err)
		}
	})
	t.Run("worker from another CA", func(t *testing.T) {
		ca2, wcert2, wkey2, _, _ := certs(t, dir, "other")
		_ = ca2
		other, err := TLSConfig(wcert2, wkey2, ca, true)
		if err != nil {
			t.Fatal(err)
		}
		w := testConfig()
		w.TLS = other
		_, _, err = link(t, w, ccfg, workerHello(), workerHello())
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a worker whose certificate the CA did not sign: %v, want ErrRefused", err)
		}
	})
	t.Run("plain TCP client", func(t *testing.T) {
		cfg := testConfig()
		cfg.Timeout = 2 * time.Second
		_, a, err := link(t, wcfg, cfg, workerHello(), workerHello())
		if err == nil || a.err == nil {
			t.Errorf("a client without TLS against a TLS worker: dial %v, accept %v", err, a.err)
		}
	})
}

func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca, wcert, wkey, _, _ := certs(t, dir, "x")
	for _, c := range []struct {
		cert, key, ca string
		server        bool
		msg           string
	}{
		{wcert, "", "", true, "both"},
		{"", "", ca, true, "needs a certificate"},
		{wcert, wkey, filepath.Join(dir, "missing.crt"), true, "missing.crt"},
		{wcert, wkey, wkey, false, "no PEM certificate"},
		{wkey, wcert, "", false, "x-worker.key"},
	} {
		if _, err := TLSConfig(c.cert, c.key, c.ca, c.server); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("TLSConfig(%q, %q, %q, %v) = %v, want an error mentioning %q", c.cert, c.key, c.ca, c.server, err, c.msg)
		}
	}
	if _, err := Listen("127.0.0.1:0", Config{Key: testKey, TLS: &tls.Config{}}); err == nil {
		t.Error("Listen with a TLS config without a certificate succeeded")
	}
}

func TestKeyFromEnvOrFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("from-the-file-0123456789\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	t.Setenv("K3_TEST_KEY", "from-the-environment-0123")
	for _, c := range []struct {
		flag, file, env string
		want, msg       string
	}{
		{"from-the-flag-0123456789", "", "K3_TEST_KEY", "from-the-flag-0123456789", ""},
		{"", file, "K3_TEST_KEY", "from-the-file-0123456789", ""},
		{"", "", "K3_TEST_KEY", "from-the-environment-0123", ""},
		{"from-the-flag-0123456789", file, "", "", "both"},
		{"", short, "", "", "3 bytes"},
		{"", filepath.Join(dir, "missing"), "", "", "missing"},
		{"", "", "K3_TEST_UNSET", "", "K3_TEST_UNSET"},
	} {
		key, err := KeyFromEnvOrFile(c.flag, c.file, c.env)
		if string(key) != c.want || (c.msg == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.msg) {
			t.Errorf("KeyFromEnvOrFile(%q, %q, %q) = %q, %v; want %q, an error mentioning %q", c.flag, c.file, c.env, key, err, c.want, c.msg)
		}
	}
	if _, err := KeyFromEnvOrFile("", "", "K3_TEST_UNSET"); !errors.Is(err, ErrNoKey) {
		t.Errorf("no key: %v, want ErrNoKey", err)
	}
}
