package k3_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/k3go/k3"
)

// TestClusterSaveLoadFork checks a session's whole state through 3 ranks,
// where rank 0 holds only its own KDA heads of it: Save writes the same
// bytes as one process's Save; a file saved by one process loads into the
// cluster and a file saved by the cluster into one process, each going on
// with one process's logits; a Fork goes on as its parent does.
func TestClusterSaveLoadFork(t *testing.T) {
	dir := tinyCheckpoint(t, 9)
	ctx := context.Background()
	ref, err := k3.Open(dir, k3.Options{MaxContext: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	prompt := make([]int, 90)
	for i := range prompt {
		prompt[i] = (i*53 + 7) % 256
	}
	next := []int{3, 141, 59}
	rs := ref.NewSession()
	defer rs.Close()
	if _, err := rs.Step(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := rs.Save(&want); err != nil {
		t.Fatal(err)
	}
	wantNext, err := rs.Step(ctx, next)
	if err != nil {
		t.Fatal(err)
	}

	peers := startWorkers(t, dir, 2, k3.WorkerOptions{Threads: 1})
	m, err := k3.Open(dir, k3.Options{MaxContext: 512, Threads: 1, Cluster: &k3.ClusterOptions{Peers: peers, Key: clusterKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.NewSession()
	defer s.Close()
	if _, err := s.Step(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := s.Save(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("3 ranks saved %d bytes, one process %d, not the same", got.Len(), want.Len())
	}
	f, err := s.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for what, sess := range map[string]*k3.Session{"the session": s, "its fork": f} {
		out, err := sess.Step(ctx, next)
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, "3 ranks, "+what+" after Save", out, wantNext)
	}
	// One process's file into the cluster, and the cluster's into one
	// process.
	l := m.NewSession()
	defer l.Close()
	if err := l.Load(bytes.NewReader(want.Bytes())); err != nil {
		t.Fatal(err)
	}
	out, err := l.Step(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "3 ranks, a loaded file", out, wantNext)
	rl := ref.NewSession()
	defer rl.Close()
	if err := rl.Load(bytes.NewReader(got.Bytes())); err != nil {
		t.Fatal(err)
	}
	if out, err = rl.Step(ctx, next); err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "one process, the cluster's file", out, wantNext)
}
