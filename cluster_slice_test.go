package k3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/k3go/k3"
)

// TestClusterSlices runs clusters of 2 and 3 ranks whose every rank,
// rank 0 included, opens only its own slice of the checkpoint (k3.Slice:
// sparse copies holding what that rank reads): the logits are the bits of
// one process on the whole checkpoint, so nothing a rank reads lies in a
// hole. A slice opened by another rank, or by one process, is refused
// with ErrSlice, and the output directory of a slice is never written
// over.
func TestClusterSlices(t *testing.T) {
	dir := tinyCheckpoint(t, 7)
	prompt := []int{3, 14, 15, 92, 65, 35, 89, 79}
	ref, err := k3.Open(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.NewSession().Logits(context.Background(), prompt)
	ref.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{2, 3} {
		slices := make([]string, ranks)
		for r := range slices {
			slices[r] = filepath.Join(t.TempDir(), fmt.Sprintf("rank%d", r))
			info, err := k3.Slice(context.Background(), dir, slices[r], k3.SliceOptions{Rank: r, Ranks: ranks})
			if err != nil {
				t.Fatalf("slice %d of %d: %v", r, ranks, err)
			}
			if info.Rank != r || info.Ranks != ranks || info.Bytes <= 0 || info.Bytes >= info.Total || info.Fingerprint == "" {
				t.Fatalf("slice %d of %d: %+v", r, ranks, info)
			}
		}
		var peers []string
		for r := 1; r < ranks; r++ {
			w, err := k3.NewWorker(slices[r], k3.WorkerOptions{Key: clusterKey, Threads: 1, Rank: r, Ranks: ranks})
			if err != nil {
				t.Fatalf("worker %d of %d on its slice: %v", r, ranks, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ready, done := make(chan string, 1), make(chan error, 1)
			go func() { done <- w.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { ready <- a.String() }) }()
			select {
			case a := <-ready:
				peers = append(peers, a)
			case err := <-done:
				t.Fatalf("worker %d: %v", r, err)
			}
			t.Cleanup(func() {
				cancel()
				<-done
				w.Close()
			})
		}
		m, err := k3.Open(slices[0], k3.Options{MaxContext: 64, Threads: 1, Cluster: &k3.ClusterOptions{Peers: peers, Key: clusterKey}})
		if err != nil {
			t.Fatalf("rank 0 of %d on its slice: %v", ranks, err)
		}
		got, err := m.NewSession().Logits(context.Background(), prompt)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, fmt.Sprintf("%d ranks, each on its slice", ranks), got, want)

		// Another rank, or one process, on a slice: refused, naming it.
		if _, err := k3.Open(slices[1], k3.Options{MaxContext: 64}); !errors.Is(err, k3.ErrSlice) {
			t.Fatalf("one process on rank 1's slice: %v, want ErrSlice", err)
		}
		if _, err := k3.Open(slices[0], k3.Options{MaxContext: 64}); !errors.Is(err, k3.ErrSlice) {
			t.Fatalf("one process on rank 0's slice: %v, want ErrSlice", err)
		}
		if w, err := k3.NewWorker(slices[1], k3.WorkerOptions{Key: clusterKey, Rank: ranks - 1, Ranks: ranks + 1}); err == nil || !errors.Is(err, k3.ErrSlice) {
			if w != nil {
				w.Close()
			}
			t.Fatalf("rank %d of %d on rank 1's slice: %v, want ErrSlice", ranks-1, ranks+1, err)
		}
		if err := k3.Pack(context.Background(), slices[0], t.TempDir(), k3.PackOptions{}); !errors.Is(err, k3.ErrSlice) {
			t.Fatalf("pack of a slice: %v, want ErrSlice", err)
		}
		// A slice cut by a k3 whose ranks held other rows (its note
		// without this layout): its holes are not read as weights.
		note := filepath.Join(slices[0], "k3-slice.json")
		b, err := os.ReadFile(note)
		if err != nil {
			t.Fatal(err)
		}
		old := regexp.MustCompile(`"layout":\s*\d+,?`).ReplaceAll(b, nil)
		if bytes.Equal(old, b) {
			t.Fatalf("the slice's note %s names no layout", b)
		}
		if err := os.WriteFile(note, old, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := k3.Open(slices[0], k3.Options{MaxContext: 64, Threads: 1, Cluster: &k3.ClusterOptions{Peers: peers, Key: clusterKey}}); !errors.Is(err, k3.ErrSlice) || !strings.Contains(err.Error(), "layout") {
			t.Fatalf("rank 0 on a slice of another layout: %v, want ErrSlice naming the layout", err)
		}
	}
	// A slice interrupted (here after its first bytes) leaves nothing that
	// could pass for a checkpoint.
	cut := filepath.Join(t.TempDir(), "cut")
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := k3.Slice(ctx, dir, cut, k3.SliceOptions{Rank: 1, Ranks: 2, Progress: func(done, total int64) { cancel() }}); !errors.Is(err, context.Canceled) {
		t.Fatalf("an interrupted slice: %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(cut); len(ents) != 0 {
		t.Fatalf("an interrupted slice left %d files in %s", len(ents), cut)
	}

	// Nothing is written over: an output that holds anything, the
	// checkpoint itself, a slice of a slice, bad ranks.
	full := t.TempDir()
	if _, err := k3.Slice(context.Background(), dir, full, k3.SliceOptions{Rank: 0, Ranks: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, dir, out string
		rank, ranks    int
	}{
		{"into a directory that is not empty", dir, full, 1, 2},
		{"into the checkpoint", dir, dir, 0, 2},
		{"of a slice", full, filepath.Join(t.TempDir(), "x"), 1, 2},
		{"for one rank", dir, filepath.Join(t.TempDir(), "y"), 0, 1},
		{"for rank 2 of 2", dir, filepath.Join(t.TempDir(), "z"), 2, 2},
	} {
		if _, err := k3.Slice(context.Background(), tc.dir, tc.out, k3.SliceOptions{Rank: tc.rank, Ranks: tc.ranks}); !errors.Is(err, k3.ErrBadOptions) {
			t.Fatalf("a slice %s: %v, want ErrBadOptions", tc.what, err)
		}
	}
}
