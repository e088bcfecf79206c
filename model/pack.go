package model

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// A packed trunk is the dense (non-expert) weights of every layer part
// rewritten into one file, trunk.bin, each part stored as the exact image
// of its in-memory buffer at a 4096-aligned offset, with an index,
// trunk.json. Loading a part is then one aligned read straight into its
// buffer, with no gaps between tensors and no alignment slack to skip.
const (
	PackedDataFile  = "trunk.bin"
	PackedIndexFile = "trunk.json"
	packFormat      = "k3-trunk"
	packVersion     = 1
)

// ErrPackMismatch reports a packed trunk that does not belong to the
// checkpoint it is used with.
var ErrPackMismatch = errors.New("packed trunk does not match the checkpoint")

// PackIndex is the content of trunk.json.
type PackIndex struct {
	Format  string       `json:"format"`
	Version int          `json:"version"`
	Align   int64        `json:"align"`
	Shards  []PackShard  `json:"shards"`
	Parts   []PackedPart `json:"parts"`
	Size    int64        `json:"size"` // of trunk.bin
}

// PackShard identifies a checkpoint shard the trunk was packed from.
type PackShard struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// PackedPart locates one part's image in trunk.bin and records the layout
// it was packed with, so that a trunk packed from another checkpoint (or by
// another version of the layout) is refused.
type PackedPart struct {
	Layer   int          `json:"layer"`
	Part    string       `json:"part"`
	Offset  int64        `json:"offset"`
	Bytes   int64        `json:"bytes"`
	Sources []PackSource `json:"sources"`
	Tensors []PackTensor `json:"tensors"`
}

// PackSource is one extent of the checkpoint copied into the image.
type PackSource struct {
	Shard  int   `json:"shard"`
	Off    int64 `json:"off"`
	Size   int64 `json:"size"`
	BufOff int64 `json:"buf_off"`
}

// PackTensor is one matrix inside a part's image.
type PackTensor struct {
	Name  string `json:"name"`
	Off   int64  `json:"off"`
	DType string `json:"dtype"`
	Rows  int    `json:"rows"`
	Cols  int    `json:"cols"`
}

// packIndexFor describes the plan's layout as a packed trunk would store
// it (offsets in trunk.bin assigned in part order).
func (p *Plan) packIndexFor() *PackIndex {
	x := &PackIndex{Format: packFormat, Version: packVersion, Align: Align}
	for _, s := range p.Ckpt.Shards {
		x.Shards = append(x.Shards, PackShard{Name: s.Name, Size: s.Header.FileSize})
	}
	var off int64
	for u := range p.parts {
		pp := &p.parts[u]
		pk := PackedPart{Layer: pp.layer, Part: pp.part.String(), Offset: off, Bytes: pp.bytes}
		for _, e := range pp.extents {
			pk.Sources = append(pk.Sources, PackSource{Shard: e.File, Off: e.Off, Size: e.Size, BufOff: e.BufOff})
		}
		for _, m := range pp.mats {
			pk.Tensors = append(pk.Tensors, PackTensor{Name: m.name, Off: m.off, DType: m.dtype.String(), Rows: m.rows, Cols: m.cols})
		}
		x.Parts = append(x.Parts, pk)
		off += (pp.bytes + Align - 1) &^ (Align - 1)
	}
	x.Size = off
	return x
}

// TrunkBytes returns the size trunk.bin will have.
func (p *Plan) TrunkBytes() int64 { return p.packIndexFor().Size }

// PackProgress reports bytes written so far out of the total.
type PackProgress func(done, total int64)

// Pack writes the packed trunk of the plan's checkpoint into dir: trunk.bin
// and trunk.json, each written under a temporary name, synced and renamed,
// so an interrupted pack leaves no partial file behind under the final
// names. dir must not be the checkpoint directory.
func (p *Plan) Pack(ctx context.Context, dir string, read ReadFunc, progress PackProgress) (err error) {
	if same, _ := sameDir(dir, p.Ckpt.Dir); same {
		return fmt.Errorf("pack: refusing to write into the checkpoint directory %s", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	idx := p.packIndexFor()
	tmpData := filepath.Join(dir, "."+PackedDataFile+".tmp")
	tmpIndex := filepath.Join(dir, "."+PackedIndexFile+".tmp")
	f, err := os.OpenFile(tmpData, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pack: %w (a previous pack may have been interrupted; remove the file)", err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			os.Remove(tmpData)
			os.Remove(tmpIndex)
		}
	}()
	var maxBytes int64
	for u := range p.parts {
		maxBytes = max(maxBytes, p.parts[u].bytes)
	}
	buf := make([]byte, (maxBytes+Align-1)&^(Align-1))
	w := bufio.NewWriterSize(f, 8<<20)
	var done int64
	for u := range p.parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		pp := &p.parts[u]
		img := buf[:(pp.bytes+Align-1)&^(Align-1)]
		clear(img)
		for _, e := range pp.extents {
			if err := read(ctx, e, img); err != nil {
				return fmt.Errorf("pack: layer %d %s: %w", pp.layer, pp.part, err)
			}
		}
		// Bytes outside the extents (alignment slack) are zero in the file.
		zeroOutside(img, pp.extents)
		if _, err := w.Write(img); err != nil {
			return fmt.Errorf("pack: writing %s: %w", tmpData, err)
		}
		done += int64(len(img))
		if progress != nil {
			progress(done, idx.Size)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("pack: writing %s: %w", tmpData, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("pack: syncing %s: %w", tmpData, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	f = nil
	js, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	if err := writeFileSync(tmpIndex, js); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if err := os.Rename(tmpData, filepath.Join(dir, PackedDataFile)); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if err := os.Rename(tmpIndex, filepath.Join(dir, PackedIndexFile)); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	return syncDir(dir)
}

// zeroOutside clears the bytes of img that no extent covers, so the packed
// image does not depend on what a direct read brought in around them.
func zeroOutside(img []byte, exts []Extent) {
	var pos int64
	for _, e := range exts {
		if e.BufOff > pos {
			clear(img[pos:e.BufOff])
		}
		pos = max(pos, e.BufOff+e.Size)
	}
	if pos < int64(len(img)) {
		clear(img[pos:])
	}
}

func writeFileSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func sameDir(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// maxPackIndexBytes bounds trunk.json.
const maxPackIndexBytes = 64 << 20

// ReadPackIndex reads and checks trunk.json from dir.
func ReadPackIndex(dir string) (*PackIndex, error) {
	f, err := os.Open(filepath.Join(dir, PackedIndexFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPackIndexBytes+1))
	if err != nil {
		return nil, err
	}
	return ParsePackIndex(data)
}

// ParsePackIndex parses trunk.json and checks its structure: the format and
// version, aligned non-overlapping parts inside the file, sane sizes.
func ParsePackIndex(data []byte) (*PackIndex, error) {
	if len(data) > maxPackIndexBytes {
		return nil, fmt.Errorf("%w: trunk.json larger than %d bytes", ErrPackMismatch, maxPackIndexBytes)
	}
	var x PackIndex
	if err := json.Unmarshal(data, &x); err != nil {
		return nil, fmt.Errorf("%w: trunk.json: %v", ErrPackMismatch, err)
	}
	if x.Format != packFormat || x.Version != packVersion || x.Align != Align {
		return nil, fmt.Errorf("%w: trunk.json is format %q version %d align %d, want %q version %d align %d",
			ErrPackMismatch, x.Format, x.Version, x.Align, packFormat, packVersion, Align)
	}
	var end int64
	for i, pk := range x.Parts {
		if pk.Offset < end || pk.Offset%Align != 0 || pk.Bytes < 0 || pk.Offset+pk.Bytes > x.Size {
			return nil, fmt.Errorf("%w: trunk.json part %d at [%d, +%d) is misplaced in a %d-byte file", ErrPackMismatch, i, pk.Offset, pk.Bytes, x.Size)
		}
		end = pk.Offset + pk.Bytes
	}
	return &x, nil
}

// UsePacked switches the plan's trunk reads to a packed trunk: each part
// becomes one aligned extent in file (the engine's index for trunk.bin,
// after the shards). The index must describe exactly this checkpoint's
// layout, and trunk.bin must have the recorded size.
func (p *Plan) UsePacked(x *PackIndex, file int, dataSize int64) error {
	want := p.packIndexFor()
	if dataSize != x.Size {
		return fmt.Errorf("%w: trunk.bin is %d bytes, the index says %d", ErrPackMismatch, dataSize, x.Size)
	}
	if len(x.Shards) != len(want.Shards) || len(x.Parts) != len(want.Parts) || x.Size != want.Size {
		return fmt.Errorf("%w: it was packed from %d shards into %d parts (%d bytes); this checkpoint has %d shards and %d parts (%d bytes)",
			ErrPackMismatch, len(x.Shards), len(x.Parts), x.Size, len(want.Shards), len(want.Parts), want.Size)
	}
	for i := range want.Shards {
		if x.Shards[i] != want.Shards[i] {
			return fmt.Errorf("%w: shard %d is %s (%d bytes), the pack was made from %s (%d bytes)",
				ErrPackMismatch, i, want.Shards[i].Name, want.Shards[i].Size, x.Shards[i].Name, x.Shards[i].Size)
		}
	}
	for i := range want.Parts {
		a, b := x.Parts[i], want.Parts[i]
		if a.Layer != b.Layer || a.Part != b.Part || a.Offset != b.Offset || a.Bytes != b.Bytes ||
			!slices.Equal(a.Sources, b.Sources) || !slices.Equal(a.Tensors, b.Tensors) {
			return fmt.Errorf("%w: layer %d %s differs", ErrPackMismatch, b.Layer, b.Part)
		}
	}
	for u := range p.parts {
		pp := &p.parts[u]
		pp.extents = []Extent{{File: file, Off: x.Parts[u].Offset, Size: pp.bytes, Region: 0, BufOff: 0}}
	}
	return nil
}
