package k3_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3"
)

// entryFiles returns the prefix-cache entry files under dir (temporary
// files excluded).
func entryFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") && !strings.Contains(d.Name(), "lock") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestClusterPrefixSlices checks that every rank keeps its own slice of
// each prefix-cache entry under rank 0's key: through 3 ranks, a prefill
// saves and a later prompt restores without moving any state between
// the ranks, with the same bits as one process's cold prefill; a worker
// whose slice is gone makes the restore happen on no rank (rank 0
// prefills from the start, exactly), and that prefill files the slice
// again, so that the next prompt restores; a worker that keeps no slices
// never lets rank 0 restore, and stays exact.
func TestClusterPrefixSlices(t *testing.T) {
	dir := tinyCheckpoint(t, 5)
	ctx := context.Background()
	ref, err := k3.Open(dir, k3.Options{MaxContext: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	head := make([]int, 150)
	for i := range head {
		head[i] = (i*37 + 11) % 256
	}
	full := append(append([]int{}, head...), 5, 77, 102, 40, 12)
	want, err := ref.NewSession().Step(ctx, full)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := generateIDs(t, ref, full, k3.GenerateOptions{MaxTokens: 6})

	// Rank 1 keeps its slices in RAM, rank 2 on disk only.
	disk := t.TempDir()
	peers := startWorkers(t, dir, 1, k3.WorkerOptions{Threads: 1})
	peers = append(peers, startWorkers(t, dir, 1, k3.WorkerOptions{Threads: 1, PrefixCache: &k3.PrefixCacheOptions{RAMBytes: -1, Dir: disk}})...)
	m, err := k3.Open(dir, k3.Options{MaxContext: 512, Threads: 1,
		PrefixCache: &k3.PrefixCacheOptions{RAMBytes: 16 << 20, DiskBytes: -1, BlockTokens: 64},
		Cluster:     &k3.ClusterOptions{Peers: peers, Key: clusterKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	step := func(what string, wantCached bool) {
		t.Helper()
		s := m.NewSession()
		defer s.Close()
		got, err := s.Step(ctx, full)
		if err != nil {
			t.Fatal(err)
		}
		if cached := s.CachedTokens() > 0; cached != wantCached {
			t.Fatalf("%s: %d tokens restored, want a restore: %v", what, s.CachedTokens(), wantCached)
		}
		requireSameBits(t, what, got, want)
	}
	// A save is a note to the workers without a reply; a round after it
	// on the links (a one-token step, which saves nothing) is answered
	// only once every worker has read it.
	synced := func() {
		t.Helper()
		s := m.NewSession()
		defer s.Close()
		if _, err := s.Step(ctx, []int{1}); err != nil {
			t.Fatal(err)
		}
	}
	s := m.NewSession()
	if _, err := s.Step(ctx, head); err != nil {
		t.Fatal(err)
	}
	s.Close()
	synced()
	if len(entryFiles(t, disk)) == 0 {
		t.Fatal("rank 2 filed no slice of the prefill's entries on its disk")
	}
	step("3 ranks, a restore on every rank", true)
	synced()
	if sb := m.Cluster().StateBytes; sb != 0 {
		t.Fatalf("a prefix save and restore moved %d bytes of states between the ranks", sb)
	}

	// Rank 2's slices are gone (evicted, or its disk replaced): no rank
	// restores; the prefill saves them again.
	for _, f := range entryFiles(t, disk) {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	step("3 ranks, a slice missing on rank 2", false)
	synced()
	if len(entryFiles(t, disk)) == 0 {
		t.Fatal("the prefill after a failed restore filed no slice on rank 2 again")
	}
	step("3 ranks, after rank 2 filed its slice again", true)
	if ids := generateIDs(t, m, full, k3.GenerateOptions{MaxTokens: 6}); !slices.Equal(ids, wantIDs) {
		t.Fatalf("3 ranks greedy after restores %v, one process %v", ids, wantIDs)
	}
	if sb := m.Cluster().StateBytes; sb != 0 {
		t.Fatalf("prefix saves and restores moved %d bytes of states between the ranks", sb)
	}

	// A worker that keeps no slices: rank 0 never restores.
	none := startWorkers(t, dir, 1, k3.WorkerOptions{Threads: 1, PrefixCache: &k3.PrefixCacheOptions{RAMBytes: -1, DiskBytes: -1}})
	m2, err := k3.Open(dir, k3.Options{MaxContext: 512, Threads: 1,
		PrefixCache: &k3.PrefixCacheOptions{RAMBytes: 16 << 20, DiskBytes: -1, BlockTokens: 64},
		Cluster:     &k3.ClusterOptions{Peers: none, Key: clusterKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	m = m2
	step("2 ranks, a worker without slices (prefill)", false)
	step("2 ranks, a worker without slices (again)", false)
}
