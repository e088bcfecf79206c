package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/internal/testkit/oracle"
	"github.com/k3go/k3/model"
)

func TestMain(m *testing.M) { fixtures.Main(m) }

// chanConn is one end of an in-memory link: frames go through channels.
type chanConn struct {
	name   string
	in     <-chan frame
	out    chan<- frame
	closed chan struct{}
	once   sync.Once
}

type frame struct {
	kind uint8
	data []byte
}

func pipe(name string) (a, b *chanConn) {
	x, y := make(chan frame, 4), make(chan frame, 4)
	a = &chanConn{name: name, in: x, out: y, closed: make(chan struct{})}
	b = &chanConn{name: "rank 0", in: y, out: x, closed: a.closed}
	return a, b
}

func (c *chanConn) Send(kind uint8, parts ...[]byte) error {
	var d []byte
	for _, p := range parts {
		d = append(d, p...)
	}
	select {
	case c.out <- frame{kind, d}:
		return nil
	case <-c.closed:
		return fmt.Errorf("%s: %w", c.name, io.ErrClosedPipe)
	}
}

func (c *chanConn) Recv(dst []byte) (uint8, []byte, error) {
	select {
	case f := <-c.in:
		if cap(dst) < len(f.data) {
			dst = make([]byte, len(f.data))
		}
		dst = dst[:len(f.data)]
		copy(dst, f.data)
		return f.kind, dst, nil
	case <-c.closed:
		return 0, nil, fmt.Errorf("%s: %w", c.name, io.EOF)
	}
}

func (c *chanConn) Peer() string { return c.name }
func (c *chanConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// cluster starts ranks-1 workers of oracle name on goroutines and returns
// rank 0's model over a Client; dial reaches a fresh worker each time.
func cluster(t *testing.T, name string, ranks int, wrap func(rank int, s RoundServer) RoundServer) (*model.Model, *Client) {
	t.Helper()
	p, _ := oracle.Open(t, name)
	read := oracle.Read(p)
	var dials []Dialer
	for r := 1; r < ranks; r++ {
		dials = append(dials, func(ctx context.Context, rank int) (Conn, error) {
			sp, err := p.Shard(rank, ranks)
			if err != nil {
				return nil, err
			}
			pool := par.New(1)
			m, err := model.Load(ctx, sp, read, model.Options{Pool: pool})
			if err != nil {
				return nil, err
			}
			a, b := pipe(fmt.Sprintf("rank %d (in-process)", rank))
			var srv RoundServer = m.NewServer()
			if wrap != nil {
				srv = wrap(rank, srv)
			}
			go func() {
				defer pool.Close()
				if err := Ready(b, nil); err == nil {
					Serve(context.Background(), b, srv)
				}
			}()
			if err := AwaitReady(a); err != nil {
				return nil, err
			}
			return a, nil
		})
	}
	c, err := NewClient(context.Background(), dials, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sp, err := p.Shard(0, ranks)
	if err != nil {
		t.Fatal(err)
	}
	pool := par.New(2)
	t.Cleanup(pool.Close)
	m, err := model.Load(context.Background(), sp, read, model.Options{Pool: pool, Ranks: c})
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// TestClusterExact runs both oracles through 2 and 3 ranks whose rounds
// and rows cross the wire encoding: teacher-forced logits bit-identical to
// the whole model's, and the client counts its rounds and bytes.
func TestClusterExact(t *testing.T) {
	for _, name := range oracle.Names {
		t.Run(name, func(t *testing.T) {
			ref, exp := oracle.Load(t, name, model.Options{})
			want := oracle.Teacher(t, ref, exp.FullIDs)
			for _, ranks := range []int{2, 3} {
				m, c := cluster(t, name, ranks, nil)
				oracle.SameBits(t, fmt.Sprintf("%d ranks", ranks), oracle.Teacher(t, m, exp.FullIDs), want, ref.Cfg.Vocab)
				st := c.Stats()
				if st.Rounds == 0 || st.BytesSent == 0 || st.BytesReceived == 0 {
					t.Fatalf("%d ranks: stats %+v", ranks, st)
				}
				if err := c.Health(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// failing fails rounds once armed, or drops its connection.
type failing struct {
	RoundServer
	mu    sync.Mutex
	armed bool
}

func (f *failing) Round(ctx context.Context, rd *model.Round) ([][]float32, error) {
	f.mu.Lock()
	armed := f.armed
	f.mu.Unlock()
	if armed {
		return nil, errors.New("the disk under this rank failed")
	}
	return f.RoundServer.Round(ctx, rd)
}

// TestClusterFaults checks what rank 0 sees when a worker's round fails
// (an error naming the rank, the link kept) and when a worker goes away
// (an error naming it, Health says it is missing, it is dialled again and
// the next pass is exact).
func TestClusterFaults(t *testing.T) {
	name := oracle.Names[0]
	ref, exp := oracle.Load(t, name, model.Options{})
	want := oracle.Teacher(t, ref, exp.FullIDs)
	var mu sync.Mutex
	servers := map[int]*failing{}
	m, c := cluster(t, name, 3, func(rank int, s RoundServer) RoundServer {
		f := &failing{RoundServer: s}
		mu.Lock()
		servers[rank] = f
		mu.Unlock()
		return f
	})
	oracle.SameBits(t, "before", oracle.Teacher(t, m, exp.FullIDs), want, ref.Cfg.Vocab)
	mu.Lock()
	servers[2].armed = true
	mu.Unlock()
	st := model.NewState(m.Cfg, 64)
	out := make([]float32, m.Cfg.Vocab)
	err := m.ForwardBatch(context.Background(), model.NewScratch(m.Cfg, 8, 4), []model.Group{{St: st, Tokens: exp.FullIDs[:3], Out: out}})
	if err == nil || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), "disk under this rank failed") {
		t.Fatalf("a failing rank: %v", err)
	}
	if err := c.Health(); err != nil {
		t.Fatalf("a rank whose round failed is still connected: %v", err)
	}
	mu.Lock()
	servers[2].armed = false
	mu.Unlock()
	oracle.SameBits(t, "after a failed round", oracle.Teacher(t, m, exp.FullIDs), want, ref.Cfg.Vocab)

	// Rank 1's link breaks: the next round fails naming it, then it is
	// dialled again.
	c.peers[0].mu.Lock()
	conn := c.peers[0].conn
	c.peers[0].mu.Unlock()
	conn.Close()
	st.Reset()
	err = m.ForwardBatch(context.Background(), model.NewScratch(m.Cfg, 8, 4), []model.Group{{St: st, Tokens: exp.FullIDs[:3], Out: out}})
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("a rank gone: %v", err)
	}
	for c.Health() != nil {
		// The background redial brings it back (no wall-clock limit: the
		// test's own timeout bounds it).
		c.peers[0].mu.Lock()
		back := c.peers[0].conn != nil
		c.peers[0].mu.Unlock()
		if back {
			break
		}
		runtimeGosched()
	}
	oracle.SameBits(t, "after the rank came back", oracle.Teacher(t, m, exp.FullIDs), want, ref.Cfg.Vocab)
}

// TestRoundAbandoned: rank 0's own rows of a round panic after the round
// was sent. The worker's reply to it must not be read as the next round's:
// the link is dropped and dialled again, and the next pass is exact.
func TestRoundAbandoned(t *testing.T) {
	name := oracle.Names[0]
	ref, exp := oracle.Load(t, name, model.Options{})
	want := oracle.Teacher(t, ref, exp.FullIDs)
	m, c := cluster(t, name, 2, nil)
	V := m.Cfg.Vocab
	rd := &model.Round{Kind: model.RoundHead, Inputs: [][]float32{make([]float32, m.Cfg.Hidden)},
		Products: []model.Product{{In: 0, N: 1, Rows: V, Out: make([]float32, V)}}}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic of rank 0's rows did not reach the caller")
			}
		}()
		c.Round(context.Background(), rd, func() error { panic("a bug in rank 0's rows") })
	}()
	for c.Health() != nil {
		runtimeGosched() // the background redial brings it back
	}
	oracle.SameBits(t, "after an abandoned round", oracle.Teacher(t, m, exp.FullIDs), want, ref.Cfg.Vocab)
}

func runtimeGosched() { time.Sleep(10 * time.Millisecond) }

// FuzzRoundDecode feeds arbitrary messages to the round and prefetch
// decoders: they never panic, refuse with ErrMessage, and a round they
// accept re-encodes to the same bytes.
func FuzzRoundDecode(f *testing.F) {
	rd := model.Round{Layer: 3, Kind: model.RoundFFN, Inputs: [][]float32{{1, 2, 3, 4}, {5}},
		Products: []model.Product{{Mat: model.MatRouter, F64: true, In: 0, N: 2, Rows: 7}, {Expert: 5, W: 2, In: 1, N: 1, Rows: 3}}}
	hdr := encodeRound(nil, &rd)
	msg := append(append(append([]byte{}, hdr...), floatBytes(rd.Inputs[0])...), floatBytes(rd.Inputs[1])...)
	f.Add(msg)
	// An expert round carrying a layer product (the shared experts' down)
	// and a GLU product picking its rows.
	ex := model.Round{Layer: 1, Kind: model.RoundExpertUp, Inputs: [][]float32{{1, 2}, {3, 4, 5, 6}},
		Products: []model.Product{{Mat: model.MatSharedDown, Layer: true, In: 1, N: 1, Rows: 2},
			{Expert: 3, W: 0, GLU: true, In: 0, N: 2, Rows: 4, Pick: []int32{1, 0}}}}
	f.Add(append(append(append([]byte{}, encodeRound(nil, &ex)...), floatBytes(ex.Inputs[0])...), floatBytes(ex.Inputs[1])...))
	// A KDA round: its output in whole heads, its sequences.
	kda := model.Round{Layer: 0, Kind: model.RoundKDA, Inputs: [][]float32{{1, 2, 3, 4, 5, 6}},
		Products: []model.Product{{Mat: model.MatOProj, In: 0, N: 3, Rows: 8, Unit: 4}},
		Seqs:     []model.RoundSeq{{ID: 1 << 40, Lo: 0, N: 2, Fresh: true}, {ID: 7, Lo: 2, N: 1, Spec: 5, At: 3}}}
	f.Add(append(append([]byte{}, encodeRound(nil, &kda)...), floatBytes(kda.Inputs[0])...))
	f.Add(msg[:roundHeader])
	f.Add([]byte{})
	f.Add(encodeRollback(nil, 9, 3))
	f.Add(append(encodeStateHeader(nil, 12, 4, 0), floatBytes([]float32{1, 2, 3})...))
	// A prefix-cache entry message.
	f.Add(encodeHeadEntry(nil, 1<<50, &HeadEntry{Key: [32]byte{1, 2}, Anchor: [32]byte{3}, Pos: 300, Tail: 44, Block: 256, Saves: 1 << 40}))
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := make([]float32, (len(b)+3)/4) // aligned
		msg := floatBytes(buf)[:len(b)]
		copy(msg, b)
		if _, _, ids, err := decodePrefetch(msg, nil); err != nil && !errors.Is(err, ErrMessage) {
			t.Fatalf("prefetch error %v is not ErrMessage", err)
		} else if err == nil && len(ids) != (len(msg)-prefetchHeader)/4 {
			t.Fatalf("a prefetch of %d bytes gave %d ids", len(msg), len(ids))
		}
		if id, from, n, rest, err := decodeStateID(msg); err != nil && !errors.Is(err, ErrMessage) {
			t.Fatalf("state message error %v is not ErrMessage", err)
		} else if err == nil && (len(rest) != len(msg)-stateHeader || string(append(encodeStateHeader(nil, id, from, n), rest...)) != string(msg)) {
			t.Fatalf("a state message of %d bytes gave id %d, parts [%d, +%d) and %d bytes", len(msg), id, from, n, len(rest))
		}
		if id, keep, err := decodeRollback(msg); err != nil && !errors.Is(err, ErrMessage) {
			t.Fatalf("rollback message error %v is not ErrMessage", err)
		} else if err == nil && string(encodeRollback(nil, id, keep)) != string(msg) {
			t.Fatalf("a rollback message decoded and encoded again: %x, was %x", encodeRollback(nil, id, keep), msg)
		}
		if id, e, err := decodeHeadEntry(msg); err != nil && !errors.Is(err, ErrMessage) {
			t.Fatalf("entry message error %v is not ErrMessage", err)
		} else if err == nil && string(encodeHeadEntry(nil, id, &e)) != string(msg) {
			t.Fatalf("an entry message decoded and encoded again: %x, was %x", encodeHeadEntry(nil, id, &e), msg)
		}
		var got model.Round
		if err := decodeRound(msg, &got); err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error %v is not ErrMessage", err)
			}
			return
		}
		again := encodeRound(nil, &got)
		for _, in := range got.Inputs {
			again = append(again, floatBytes(in)...)
		}
		if string(again) != string(msg) {
			t.Fatalf("decoded and encoded again: %x, was %x", again, msg)
		}
	})
}
