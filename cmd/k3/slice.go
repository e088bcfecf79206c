package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/progress"
)

// runSlice is "k3 slice": the share of a checkpoint one rank of a cluster
// reads, as sparse files, for a node's own disk.
func runSlice(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("slice", "--model DIR --rank R --ranks N --out DIR", stderr)
	dir := fs.String("model", "", "checkpoint `directory` (the whole checkpoint; it is only read)")
	out := fs.String("out", "", "output `directory` for the rank's slice: must not exist or be empty")
	rank := fs.Int("rank", -1, "the rank the slice is for, 0..N-1 (0: the k3 command with --peers)")
	ranks := fs.Int("ranks", 0, "the cluster's size N, at least 2")
	cli.InputDirs(fs, "model")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	switch {
	case *dir == "" || *out == "":
		return cli.Usagef("--model and --out are required")
	case *ranks < 2:
		return cli.Usagef("--ranks %d: a cluster has at least 2 ranks", *ranks)
	case *rank < 0 || *rank >= *ranks:
		return cli.Usagef("--rank %d: want 0..%d for --ranks %d", *rank, *ranks-1, *ranks)
	}
	ctx, cancel := writerSignalContext()
	defer cancel()
	var bar *progress.Bar
	start := time.Now()
	info, err := k3.Slice(ctx, *dir, *out, k3.SliceOptions{Rank: *rank, Ranks: *ranks, Progress: func(done, t int64) {
		if bar == nil {
			bar = progress.New(os.Stderr, "slice", t)
		}
		bar.Update(done)
	}})
	bar.Done()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rank %d of %d: %.2f GB of the checkpoint's %.2f GB (%.1f%%) into %s in %.1f s; fingerprint %s kept\n",
		info.Rank, info.Ranks, float64(info.Bytes)/1e9, float64(info.Total)/1e9, 100*float64(info.Bytes)/float64(max(info.Total, 1)),
		*out, time.Since(start).Seconds(), info.Fingerprint)
	return nil
}
