package k3

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// PackOptions configure Pack.
type PackOptions struct {
	// Progress, if set, is called with the bytes written so far and the
	// total.
	Progress func(done, total int64)
	// Force replaces an existing packed trunk in the output directory.
	Force bool
	// Compress writes the trunk compressed: every part in blocks of 256
	// KiB that decode independently, the BF16 exponent bytes Huffman
	// coded and the sign and mantissa bits stored as they are, each block
	// with a CRC-32C. Decoding is exact. MeasureCompression says whether
	// it pays off on a machine.
	Compress bool
}

// Pack rewrites the dense (non-expert) weights of the checkpoint in dir
// into a packed trunk in out: trunk.bin, every layer part at an aligned
// offset as the exact image of its buffer (or its compressed blocks), and
// the index trunk.json, which records the checkpoint's content
// fingerprint. Open with Options.TrunkDir = out then reads each part with
// one aligned request. Files are written under temporary names, synced and
// renamed; the checkpoint is never written to, and out must not be it.
func Pack(ctx context.Context, dir, out string, opts PackOptions) error {
	if abs, _ := filepath.Abs(out); abs != "" {
		if d, _ := filepath.Abs(dir); d == abs {
			return fmt.Errorf("k3: pack: %w: the output directory is the checkpoint directory", ErrBadOptions)
		}
	}
	for _, name := range []string{model.PackedDataFile, model.PackedIndexFile} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil && !opts.Force {
			return fmt.Errorf("k3: pack: %w: %s already exists (use Force to replace it)", ErrBadOptions, filepath.Join(out, name))
		}
	}
	e, plan, err := openForPack(dir)
	if err != nil {
		return err
	}
	defer e.closePack()
	unlock, err := claimPackDir(out, opts.Force)
	if err != nil {
		return err
	}
	defer unlock()
	if err := plan.Pack(ctx, out, e.read, model.PackWriteOptions{Compress: opts.Compress, Progress: opts.Progress}); err != nil {
		return fmt.Errorf("k3: %w", err)
	}
	return nil
}

// claimPackDir creates out, locks it for this pack (iox.LockDir) and
// removes the temporary files a killed pack left there: holding the lock
// proves their writer is gone. Where locks are unsupported, only Force
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
		// The temporary names model.Plan.Pack writes under.
		for _, name := range []string{model.PackedDataFile, model.PackedIndexFile} {
			p := filepath.Join(out, "."+name+".tmp")
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				unlock()
				return nil, fmt.Errorf("k3: pack: removing the stale %s: %w", p, err)
			}
		}
	}
	return unlock, nil
}

// openForPack opens the checkpoint in dir with direct-I/O files and a
// reader, for packing or measuring; closePack releases them.
func openForPack(dir string) (_ *engine, _ *model.Plan, err error) {
	cfg, err := readConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, nil, err
	}
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("k3: %w", checkpointErr(err))
	}
	e := &engine{ck: ck}
	defer func() {
		if err != nil {
			e.closePack()
		}
	}()
	plan, err := model.NewPlan(cfg, ck)
	if err != nil {
		return nil, nil, fmt.Errorf("k3: %w", checkpointErr(err))
	}
	for _, sh := range ck.Shards {
		f, err := iox.OpenFile(sh.Path, iox.FileOptions{Direct: true})
		if err != nil {
			return nil, nil, fmt.Errorf("k3: %w", err)
		}
		e.files = append(e.files, f)
		e.srcs = append(e.srcs, f)
	}
	if e.reader, err = iox.NewReader(iox.ReaderOptions{}); err != nil {
		return nil, nil, err
	}
	return e, plan, nil
}

func (e *engine) closePack() {
	if e.reader != nil {
		e.reader.Close()
	}
	for _, f := range e.files {
		f.Close()
	}
	e.ck.Close()
}
