package iox_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/k3go/k3/iox"
)

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
}

var smallProbe = iox.ProbeOptions{
	FileSize:       8 << 20,
	QueueDepths:    []int{1, 4},
	ChunkSize:      1 << 20,
	RandomReadSize: 1_754_726, // an expert scaled down, unaligned
	SmallReadSize:  64 << 10,
	MinFree:        -1,
}

func TestProbeBandwidth(t *testing.T) {
	dir := t.TempDir()
	res, err := iox.ProbeBandwidth(context.Background(), dir, smallProbe)
	if err != nil {
		t.Fatal(err)
	}
	emptyDir(t, dir)
	if res.FileSize != 8<<20 || len(res.Runs) != 2 || res.Write.Bytes != 8<<20 {
		t.Fatalf("%+v", res)
	}
	for _, run := range res.Runs {
		if run.Sequential.Bytes != 8<<20 || run.Random.Ops != 8 || run.Random.Bytes != 8*1_754_726 || run.Small.Ops != 64 ||
			run.Sequential.GBps() <= 0 || run.Random.GBps() <= 0 || run.Small.GBps() <= 0 {
			t.Fatalf("%+v", run)
		}
		if res.Direct && run.Stats.DirectReads != run.Stats.Reads {
			t.Fatalf("direct result with buffered reads: %+v", run.Stats)
		}
		t.Logf("QD %d: sequential %v; random %v; small %v", run.QueueDepth, run.Sequential, run.Random, run.Small)
	}
	t.Logf("%s (%s): direct read %v, direct write %v, write %v; note %q", dir, res.FSType, res.Direct, res.DirectWrite, res.Write, res.Note)
	if !res.Direct && res.Note == "" {
		t.Fatal("no note for buffered reads")
	}
}

func TestProbeFallback(t *testing.T) {
	dir := t.TempDir()
	res, err := iox.ProbeBandwidth(context.Background(), dir, iox.ProbeWithDirectRefused(smallProbe, syscall.EINVAL))
	if err != nil {
		t.Fatal(err)
	}
	emptyDir(t, dir)
	if res.Direct || !strings.Contains(res.Note, "page cache") {
		t.Fatalf("direct %v, note %q", res.Direct, res.Note)
	}
}

func TestProbeRefusals(t *testing.T) {
	dir := t.TempDir()
	opts := smallProbe
	opts.MinFree = 1 << 62
	if _, err := iox.ProbeBandwidth(context.Background(), dir, opts); !errors.Is(err, iox.ErrInsufficientSpace) {
		t.Fatalf("err = %v", err)
	}
	emptyDir(t, dir)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := iox.ProbeBandwidth(ctx, dir, smallProbe); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	emptyDir(t, dir)

	// Cancelled while reading.
	ctx, cancel = context.WithCancel(context.Background())
	opts = smallProbe
	opts.QueueDepths = []int{1, 2, 3, 4, 5, 6, 7, 8}
	go func() {
		for ctx.Err() == nil {
			if ents, _ := os.ReadDir(dir); len(ents) > 0 {
				cancel()
			}
		}
	}()
	_, err := iox.ProbeBandwidth(ctx, dir, opts)
	cancel()
	t.Logf("cancelled mid-probe: %v", err)
	emptyDir(t, dir)

	if _, err := iox.ProbeBandwidth(context.Background(), dir, iox.ProbeOptions{QueueDepths: []int{0}}); err == nil {
		t.Fatal("queue depth 0 accepted")
	}
	if _, err := iox.ProbeBandwidth(context.Background(), dir+"/missing", smallProbe); err == nil {
		t.Fatal("missing dir accepted")
	}
}

// TestProbeDisk runs the default-size probe (1 GiB, queue depths 1, 8, 16)
// on the directory named by K3_IOX_PROBE_DIR; skipped when it is unset.
func TestProbeDisk(t *testing.T) {
	dir := os.Getenv("K3_IOX_PROBE_DIR")
	if dir == "" {
		t.Skip("set K3_IOX_PROBE_DIR to probe a disk")
	}
	res, err := iox.ProbeBandwidth(context.Background(), dir, iox.ProbeOptions{QueueDepths: []int{1, 8, 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s): %d MiB file, direct read %v, direct write %v, write %v; note %q",
		dir, res.FSType, res.FileSize>>20, res.Direct, res.DirectWrite, res.Write, res.Note)
	for _, run := range res.Runs {
		t.Logf("QD %2d: sequential %v", run.QueueDepth, run.Sequential)
		t.Logf("       random     %v", run.Random)
		t.Logf("       small      %v", run.Small)
	}
}
