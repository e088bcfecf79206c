package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/progress"
	"github.com/k3go/k3/internal/engine/trunk"
)

func runPack(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("pack", "--model DIR --out TRUNKDIR", stderr)
	dir := fs.String("model", "", "checkpoint `directory`")
	out := fs.String("out", "", "output `directory` for trunk.bin and trunk.json")
	force := fs.Bool("force", false, "replace an existing packed trunk in --out")
	compress := fs.Bool("compress", false, "write the trunk compressed (BF16 exponents Huffman coded, blocks decoded in parallel)")
	dryRun := fs.Bool("dry-run", false, "with --compress: measure the ratio on a sample and this machine's decode and disk rates, write nothing")
	cli.InputDirs(fs, "model")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *dir == "" || (*out == "" && !*dryRun) {
		return cli.Usagef("--model and --out are required")
	}
	// The library refuses too, but in its own terms (PackOptions.Force);
	// here the fix is a flag.
	for _, name := range []string{trunk.PackedDataFile, trunk.PackedIndexFile} {
		if p := filepath.Join(*out, name); !*dryRun && !*force && fileExists(p) {
			return cli.Usagef("%s already exists (use --force to replace it)", p)
		}
	}
	ctx, cancel := writerSignalContext()
	defer cancel()
	if *dryRun {
		if !*compress {
			return cli.Usagef("--dry-run measures compression: use it with --compress")
		}
		return packDryRun(ctx, *dir, stdout)
	}
	var bar *progress.Bar
	start := time.Now()
	var total int64
	err := k3.Pack(ctx, *dir, *out, k3.PackOptions{Force: *force, Compress: *compress, Progress: func(done, t int64) {
		if bar == nil {
			bar, total = progress.New(os.Stderr, "pack", t), t
		}
		bar.Update(done)
	}})
	bar.Done()
	if err != nil {
		return err
	}
	el := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "packed %.2f GB into %s in %.1f s (%.0f MB/s)\n", float64(total)/1e9, *out, el, float64(total)/el/1e6)
	if *compress {
		if x, err := trunk.ReadPackIndex(*out); err == nil && total > 0 {
			fmt.Fprintf(stdout, "compressed to %.2f GB (ratio %.3f)\n", float64(x.Size)/1e9, float64(x.Size)/float64(total))
		}
	}
	return nil
}

// packDryRun reports what --compress would give on this checkpoint and
// machine.
func packDryRun(ctx context.Context, dir string, stdout io.Writer) error {
	r, err := k3.MeasureCompression(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, r.String())
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
