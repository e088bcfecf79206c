package k3_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

var clusterKey = []byte("k3 test cluster key, 32 bytes...")

// startWorkers starts n workers of the checkpoint in dir on 127.0.0.1
// (ephemeral ports) and returns their addresses, rank 1 first.
func startWorkers(t *testing.T, dir string, n int, opts k3.WorkerOptions) []string {
	t.Helper()
	opts.Key = clusterKey
	var addrs []string
	for range n {
		w, err := k3.NewWorker(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() { done <- w.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { ready <- a.String() }) }()
		select {
		case a := <-ready:
			addrs = append(addrs, a)
		case err := <-done:
			t.Fatalf("worker: %v", err)
		}
		t.Cleanup(func() {
			cancel()
			<-done
			w.Close()
		})
	}
	return addrs
}

// TestClusterOracles runs both oracles through clusters of 1, 2 and 3
// ranks on loopback, each worker a Worker in this process: the oracle's
// gates hold, the logits of teacher forcing and of greedy decoding are
// byte-identical to one process's, a batch of sessions of different
// lengths through 2 ranks equals each alone, and the rounds are counted.
func TestClusterOracles(t *testing.T) {
	for _, name := range oracles {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Path(t, "oracle/"+name)
			ref, exp := openOracle(t, name, k3.Options{MaxContext: 64})
			V := ref.Config().Vocab
			want, err := ref.NewSession().Logits(context.Background(), exp.FullIDs)
			if err != nil {
				t.Fatal(err)
			}
			seqs := [][]int{exp.FullIDs[:3], exp.FullIDs, exp.FullIDs[2:9]}
			var wantSeqs [][]float32
			for _, s := range seqs {
				l, err := ref.NewSession().Logits(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				wantSeqs = append(wantSeqs, l)
			}
			for _, ranks := range []int{2, 3} {
				peers := startWorkers(t, dir, ranks-1, k3.WorkerOptions{Threads: 1})
				m, err := k3.Open(dir, k3.Options{MaxContext: 64, Sessions: 4, Threads: 1,
					Cluster: &k3.ClusterOptions{Peers: peers, Key: clusterKey}})
				if err != nil {
					t.Fatal(err)
				}
				got, err := m.NewSession().Logits(context.Background(), exp.FullIDs)
				if err != nil {
					t.Fatal(err)
				}
				requireSameBits(t, fmt.Sprintf("%d ranks, teacher forcing", ranks), got, want)
				checkLogits(t, exp, got, V)
				// Sessions of different lengths in shared passes.
				gots := make([][]float32, len(seqs))
				errs := make([]error, len(seqs))
				var wg sync.WaitGroup
				for i, s := range seqs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						gots[i], errs[i] = m.NewSession().Logits(context.Background(), s)
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				for i := range seqs {
					requireSameBits(t, fmt.Sprintf("%d ranks, batched sequence %d", ranks, i), gots[i], wantSeqs[i])
				}
				cs := m.Cluster()
				if cs.Ranks != ranks || cs.Health != nil || cs.Rounds == 0 || cs.BytesSent == 0 {
					t.Fatalf("%d ranks: %+v", ranks, cs)
				}
				m.Close()
			}
		})
	}
}

// requireSameBits fails at the first float of got that differs from want.
func requireSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if i := firstBitDiff(got, want); i >= 0 || len(want) == 0 {
		t.Fatalf("%s: %d logits differ from the %d wanted at index %d", what, len(got), len(want), i)
	}
}
