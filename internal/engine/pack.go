package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/k3go/k3/internal/engine/trunk"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// Pack rewrites the dense weights of the checkpoint in dir into a packed
// trunk in out; see k3.Pack.
func Pack(ctx context.Context, dir, out string, force bool, opts trunk.PackWriteOptions) error {
	if abs, _ := filepath.Abs(out); abs != "" {
		if d, _ := filepath.Abs(dir); d == abs {
			return fmt.Errorf("k3: pack: %w: the output directory is the checkpoint directory", ErrBadOptions)
		}
	}
	for _, name := range []string{trunk.PackedDataFile, trunk.PackedIndexFile} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil && !force {
			return fmt.Errorf("k3: pack: %w: %s already exists (use Force to replace it)", ErrBadOptions, filepath.Join(out, name))
		}
	}
	r, err := openRaw(dir)
	if err != nil {
		return err
	}
	defer r.close()
	unlock, err := claimPackDir(out, force)
	if err != nil {
		return err
	}
	defer unlock()
	if err := trunk.Pack(ctx, r.plan, out, r.read, opts); err != nil {
		return fmt.Errorf("k3: %w", err)
	}
	return nil
}

// claimPackDir creates out, locks it for this pack (iox.LockDir) and
// removes the temporary files a killed pack left there: holding the lock
// proves their writer is gone. Where locks are unsupported, only force
// removes them. Another pack running into out is an error.
func claimPackDir(out string, force bool) (unlock func(), err error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("k3: pack: %w", err)
	}
	unlock, err = iox.LockDir(out)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		unlock = func() {}
	case errors.Is(err, iox.ErrLocked):
		return nil, fmt.Errorf("k3: pack: %w: another k3 pack is writing into %s", ErrBadOptions, out)
	case err != nil:
		return nil, fmt.Errorf("k3: pack: %w", err)
	}
	if err == nil || force {
		// The temporary names trunk.Pack writes under.
		for _, name := range []string{trunk.PackedDataFile, trunk.PackedIndexFile} {
			p := filepath.Join(out, "."+name+".tmp")
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				unlock()
				return nil, fmt.Errorf("k3: pack: removing the stale %s: %w", p, err)
			}
		}
	}
	return unlock, nil
}

// MeasureCompression samples the trunk of the checkpoint in dir; see
// k3.MeasureCompression.
func MeasureCompression(ctx context.Context, dir string) (trunk.CompressionReport, error) {
	r, err := openRaw(dir)
	if err != nil {
		return trunk.CompressionReport{}, err
	}
	defer r.close()
	// Buffers from the Go heap (large ones are page-aligned; the reader
	// copies through a bounce buffer otherwise).
	heap := func(n int64) ([]byte, error) { return make([]byte, n), nil }
	rep, err := trunk.NewLayout(r.plan).MeasureCompression(ctx, r.read, heap, true)
	if err != nil {
		return rep, fmt.Errorf("k3: %w", err)
	}
	return rep, nil
}

// raw is a checkpoint opened with direct-I/O files and a reader, and no
// model: for packing and measuring.
type raw struct {
	ck     *iox.Checkpoint
	plan   *model.Plan
	files  []*iox.File
	reader *iox.Reader
}

// openRaw opens the checkpoint in dir for packing or measuring; close
// releases it.
func openRaw(dir string) (_ *raw, err error) {
	if err := checkSlice(dir, 0, 1); err != nil {
		return nil, err
	}
	cfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	r := &raw{}
	if r.ck, err = iox.OpenCheckpoint(dir); err != nil {
		return nil, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.plan, err = model.NewPlan(cfg, r.ck); err != nil {
		return nil, fmt.Errorf("k3: %w", CheckpointErr(err))
	}
	for _, sh := range r.ck.Shards {
		f, err := iox.OpenFile(sh.Path, iox.FileOptions{Direct: true})
		if err != nil {
			return nil, fmt.Errorf("k3: %w", err)
		}
		r.files = append(r.files, f)
	}
	if r.reader, err = iox.NewReader(iox.ReaderOptions{}); err != nil {
		return nil, err
	}
	return r, nil
}

// read performs one extent read and returns once nothing writes into buf.
func (r *raw) read(ctx context.Context, x iox.Extent, buf []byte) error {
	_, w := x.Window()
	f := r.reader.Submit(ctx, iox.Request{Src: r.files[x.File], Off: x.Off, Len: int(x.Size), Dst: buf[x.Region : x.Region+w]})
	_, err := f.Wait()
	<-f.Released()
	return err
}

func (r *raw) close() {
	if r.reader != nil {
		r.reader.Close()
	}
	for _, f := range r.files {
		f.Close()
	}
	r.ck.Close()
}
