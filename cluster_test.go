package k3_test

import (
	"context"
	"fmt"
	"net"
	"slices"
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

// TestClusterModes runs the wide checkpoint over 2 ranks, each near the
// one-process floor (where a rank still streams its trunk), against one
// process with everything resident: a prompt's logits and its greedy
// tokens, the same prompt's continuation restored from the prefix cache
// (every rank computes nothing for the restored part: the state is rank
// 0's), and speculative decoding give the same bits and tokens.
func TestClusterModes(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 250 MB checkpoint")
	}
	dir := wideCheckpoint(t)
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 512, Speculate: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0 holds a cluster pass's buffers besides the one-process floor.
	budget := in.FloorBytes + 48<<20
	ref, err := k3.Open(dir, k3.Options{MaxContext: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	head := make([]int, 300)
	for i := range head {
		head[i] = (i*37 + 11) % 4096
	}
	full := append(append([]int{}, head...), 5, 77, 1023, 4000, 12)
	want, err := ref.NewSession().Logits(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := generateIDs(t, ref, full, k3.GenerateOptions{MaxTokens: 12})

	peers := startWorkers(t, dir, 1, k3.WorkerOptions{RAMBudget: budget, Threads: 1})
	m, err := k3.Open(dir, k3.Options{MaxContext: 512, RAMBudget: budget, Threads: 1, Speculate: 4,
		PrefixCache: &k3.PrefixCacheOptions{RAMBytes: 32 << 20, DiskBytes: -1, BlockTokens: 64},
		Cluster:     &k3.ClusterOptions{Peers: peers, Key: clusterKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The head alone, then the whole prompt: its first 256 tokens are
	// restored from the prefix cache.
	s := m.NewSession()
	if _, err := s.Step(context.Background(), head); err != nil {
		t.Fatal(err)
	}
	s.Close()
	st := m.Stats()
	s = m.NewSession()
	got, err := s.Logits(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	requireSameBits(t, "2 ranks near the floor, teacher forcing", got, want)
	s = m.NewSession()
	last, err := s.Step(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedTokens() == 0 {
		t.Fatal("nothing of the prompt was restored from the prefix cache")
	}
	requireSameBits(t, "2 ranks, after a prefix restore", last, want[(len(full)-1)*len(last):])
	s.Close()
	if d := m.Stats().Sub(st); d.TrunkBytesRead == 0 {
		t.Fatal("rank 0 at the floor read none of its trunk: the run did not stream")
	}
	if ids := generateIDs(t, m, full, k3.GenerateOptions{MaxTokens: 12}); !slices.Equal(ids, wantIDs) {
		t.Fatalf("2 ranks greedy %v, one process %v", ids, wantIDs)
	}
	if ids := generateIDs(t, m, full, k3.GenerateOptions{MaxTokens: 12, Speculate: 4}); !slices.Equal(ids, wantIDs) {
		t.Fatalf("2 ranks speculative %v, one process %v", ids, wantIDs)
	}
	// Prefix saves and restores, speculation and its rollbacks all run on
	// each rank's own KDA heads.
	if sb := m.Cluster().StateBytes; sb != 0 {
		t.Fatalf("2 ranks moved %d bytes of states between them", sb)
	}
}
