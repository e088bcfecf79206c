package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/progress"
	"github.com/k3go/k3/model"
)

func runPack(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pack", "--model DIR --out TRUNKDIR", stderr)
	dir := fs.String("model", "", "checkpoint `directory`")
	out := fs.String("out", "", "output `directory` for trunk.bin and trunk.json")
	force := fs.Bool("force", false, "replace an existing packed trunk in --out")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		return usagef("--model and --out are required")
	}
	// The library refuses too, but in its own terms (PackOptions.Force);
	// here the fix is a flag.
	for _, name := range []string{model.PackedDataFile, model.PackedIndexFile} {
		if p := filepath.Join(*out, name); !*force && fileExists(p) {
			return usagef("%s already exists (use --force to replace it)", p)
		}
	}
	ctx, cancel := signalContext()
	defer cancel()
	var bar *progress.Bar
	start := time.Now()
	var total int64
	err := k3.Pack(ctx, *dir, *out, k3.PackOptions{Force: *force, Progress: func(done, t int64) {
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
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
