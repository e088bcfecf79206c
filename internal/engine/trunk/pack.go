package trunk

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

	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/model"
)

// A packed trunk is the dense (non-expert) weights of every layer part
// rewritten into one file, trunk.bin, each part stored as the exact image
// of its in-memory buffer at a 4096-aligned offset, with an index,
// trunk.json. Loading a part is then one aligned read straight into its
// buffer, with no gaps between tensors and no alignment slack to skip. A
// compressed pack (PackOptions.Compress) stores each part as blocks that
// decode independently (see compress.go) instead of the image itself.
//
// Version 2 adds the checkpoint's content fingerprint and compression;
// version 1 packs are refused (pack again).
const (
	PackedDataFile  = "trunk.bin"
	PackedIndexFile = "trunk.json"
	packFormat      = "k3-trunk"
	packVersion     = 2
)

// ErrPackMismatch reports a packed trunk that does not belong to the
// checkpoint it is used with.
var ErrPackMismatch = errors.New("packed trunk does not match the checkpoint")

// PackIndex is the content of trunk.json.
type PackIndex struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Align   int64  `json:"align"`
	// Fingerprint is the checkpoint's content fingerprint
	// (model.Plan.Fingerprint): a pack made from another checkpoint with the
	// same config is refused.
	Fingerprint string       `json:"fingerprint"`
	Compressed  bool         `json:"compressed,omitempty"`
	Shards      []PackShard  `json:"shards"`
	Parts       []PackedPart `json:"parts"`
	Size        int64        `json:"size"` // of trunk.bin
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
	// A compressed part stores Stored bytes at Offset: blocks of Block raw
	// bytes (the last one shorter) ending at BlockEnds inside the stored
	// bytes, whose decoded bytes have the CRC-32C (Castagnoli) in CRC.
	Stored    int64    `json:"stored,omitempty"`
	Block     int      `json:"block,omitempty"`
	BlockEnds []int64  `json:"block_ends,omitempty"`
	CRC       []uint32 `json:"crc,omitempty"`
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
func packIndexFor(p *model.Plan) *PackIndex {
	x := &PackIndex{Format: packFormat, Version: packVersion, Align: Align}
	for _, s := range p.Ckpt.Shards {
		x.Shards = append(x.Shards, PackShard{Name: s.Name, Size: s.Header.FileSize})
	}
	var off int64
	for _, pl := range p.Parts() {
		pk := PackedPart{Layer: pl.Layer, Part: pl.Part.String(), Offset: off, Bytes: pl.Bytes}
		for _, e := range pl.Extents {
			pk.Sources = append(pk.Sources, PackSource{Shard: e.File, Off: e.Off, Size: e.Size, BufOff: e.BufOff})
		}
		for _, m := range pl.Tensors {
			pk.Tensors = append(pk.Tensors, PackTensor{Name: m.Name, Off: m.Off, DType: m.DType.String(), Rows: m.Rows, Cols: m.Cols})
		}
		x.Parts = append(x.Parts, pk)
		off += (pl.Bytes + Align - 1) &^ (Align - 1)
	}
	x.Size = off
	return x
}

// PackedBytes returns the size an uncompressed trunk.bin of p has.
func PackedBytes(p *model.Plan) int64 { return packIndexFor(p).Size }

// PackProgress reports bytes written so far out of the total.
type PackProgress func(done, total int64)

// PackWriteOptions configure Pack.
type PackWriteOptions struct {
	// Compress stores each part as independently decoded compressed
	// blocks (exponent bytes Huffman coded, sign and mantissa as they are).
	Compress bool
	// Progress, if set, is called after each part.
	Progress PackProgress
}

// Pack writes the packed trunk of the plan's checkpoint into dir: trunk.bin
// and trunk.json, each written under a temporary name, synced and renamed,
// so an interrupted pack leaves no partial file behind under the final
// names. dir must not be the checkpoint directory.
func Pack(ctx context.Context, p *model.Plan, dir string, read ReadFunc, opts PackWriteOptions) (err error) {
	if same, _ := sameDir(dir, p.Ckpt.Dir); same {
		return fmt.Errorf("pack: refusing to write into the checkpoint directory %s", dir)
	}
	fp, err := p.Ckpt.Fingerprint()
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	idx := packIndexFor(p)
	idx.Fingerprint, idx.Compressed = fp, opts.Compress
	rawTotal := idx.Size
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
	for _, pl := range p.Parts() {
		maxBytes = max(maxBytes, pl.Bytes)
	}
	buf := make([]byte, (maxBytes+Align-1)&^(Align-1))
	var enc blockEncoder
	var stored []byte
	w := bufio.NewWriterSize(f, 8<<20)
	var done, off int64
	for u, pl := range p.Parts() {
		if err := ctx.Err(); err != nil {
			return err
		}
		img := buf[:(pl.Bytes+Align-1)&^(Align-1)]
		clear(img)
		for _, e := range pl.Extents {
			if err := read(ctx, e, img); err != nil {
				return fmt.Errorf("pack: layer %d %s: %w", pl.Layer, pl.Part, err)
			}
		}
		// Bytes outside the extents (alignment slack) are zero in the file.
		zeroOutside(img, pl.Extents)
		out := img
		if opts.Compress {
			var cp *compPart
			stored, cp = compressImage(&enc, stored[:0], img[:pl.Bytes])
			pk := &idx.Parts[u]
			pk.Offset, pk.Stored, pk.Block, pk.CRC = off, cp.stored, cp.block, cp.crc
			pk.BlockEnds = cp.offs[1:]
			n := (int64(len(stored)) + Align - 1) &^ (Align - 1)
			stored = append(stored, make([]byte, n-int64(len(stored)))...)
			out = stored
		}
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("pack: writing %s: %w", tmpData, err)
		}
		off += int64(len(out))
		done += int64(len(img))
		if opts.Progress != nil {
			opts.Progress(done, rawTotal)
		}
	}
	idx.Size = off
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
	return iox.SyncDir(dir)
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
		span := pk.Bytes
		if x.Compressed {
			if err := checkCompressedPart(&pk); err != nil {
				return nil, fmt.Errorf("%w: trunk.json part %d (layer %d %s): %v", ErrPackMismatch, i, pk.Layer, pk.Part, err)
			}
			span = pk.Stored
		} else if pk.Stored != 0 || pk.Block != 0 || pk.BlockEnds != nil || pk.CRC != nil {
			return nil, fmt.Errorf("%w: trunk.json part %d has a block table but the pack is not compressed", ErrPackMismatch, i)
		}
		if pk.Offset < end || pk.Offset%Align != 0 || pk.Bytes < 0 || pk.Offset+span > x.Size {
			return nil, fmt.Errorf("%w: trunk.json part %d at [%d, +%d) is misplaced in a %d-byte file", ErrPackMismatch, i, pk.Offset, span, x.Size)
		}
		end = pk.Offset + span
	}
	return &x, nil
}

// UsePack switches the layout's reads to a packed trunk: each part becomes
// one aligned extent in file (the engine's index for trunk.bin, after the
// shards). The index must describe exactly this checkpoint's layout, and
// trunk.bin must have the recorded size.
func (l *Layout) UsePack(x *PackIndex, file int, dataSize int64) error {
	fp, err := l.plan.Ckpt.Fingerprint()
	if err != nil {
		return err
	}
	if x.Fingerprint != fp {
		return fmt.Errorf("%w: it was packed from a checkpoint with other contents (fingerprint %s, this checkpoint's is %s): the config matches but the weights differ; pack this checkpoint again",
			ErrPackMismatch, x.Fingerprint, fp)
	}
	if dataSize != x.Size {
		return fmt.Errorf("%w: trunk.bin is %d bytes, the index says %d", ErrPackMismatch, dataSize, x.Size)
	}
	return l.applyPack(x, file)
}

// PlanPack lays the parts out as UsePack would, for planning only (Inspect:
// a compressed part needs a little more room to decode in place, see
// compRoom). It checks the layout but not the content fingerprint or
// trunk.bin, which UsePack checks; the layout must not be used to read.
func (l *Layout) PlanPack(x *PackIndex) error { return l.applyPack(x, -1) }

// applyPack checks that x describes this checkpoint's layout and points the
// parts at file.
func (l *Layout) applyPack(x *PackIndex, file int) error {
	want := packIndexFor(l.plan)
	if len(x.Shards) != len(want.Shards) || len(x.Parts) != len(want.Parts) || (!x.Compressed && x.Size != want.Size) {
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
		if a.Layer != b.Layer || a.Part != b.Part || (!x.Compressed && a.Offset != b.Offset) || a.Bytes != b.Bytes ||
			!slices.Equal(a.Sources, b.Sources) || !slices.Equal(a.Tensors, b.Tensors) {
			return fmt.Errorf("%w: layer %d %s differs", ErrPackMismatch, b.Layer, b.Part)
		}
	}
	for u := range l.parts {
		pp := &l.parts[u]
		pk := &x.Parts[u]
		if !x.Compressed {
			pp.extents = []Extent{{File: file, Off: pk.Offset, Size: pp.Bytes, Region: 0, BufOff: 0}}
			continue
		}
		pp.extents = []Extent{{File: file, Off: pk.Offset, Size: pk.Stored, Region: 0, BufOff: 0}}
		pp.comp = &compPart{stored: pk.Stored, block: pk.Block, offs: append([]int64{0}, pk.BlockEnds...), crc: pk.CRC}
	}
	return nil
}

// checkCompressedPart checks a compressed part's block table: the block
// size the reader uses, one block per Block raw bytes, ends increasing up
// to Stored, each block at least its header and sign+mantissa bytes.
func checkCompressedPart(pk *PackedPart) error {
	if pk.Block != compBlockBytes {
		return fmt.Errorf("block size %d, want %d", pk.Block, compBlockBytes)
	}
	if pk.Bytes%2 != 0 {
		return fmt.Errorf("odd part size %d", pk.Bytes)
	}
	nb := int((pk.Bytes + int64(pk.Block) - 1) / int64(pk.Block))
	if len(pk.BlockEnds) != nb || len(pk.CRC) != nb {
		return fmt.Errorf("%d block ends and %d checksums for %d blocks", len(pk.BlockEnds), len(pk.CRC), nb)
	}
	var prev int64
	for b, e := range pk.BlockEnds {
		raw := min(int64(pk.Block), pk.Bytes-int64(b)*int64(pk.Block))
		if e-prev < compHeader+1+raw/2 {
			return fmt.Errorf("block %d ends at %d, too short after %d", b, e, prev)
		}
		prev = e
	}
	if prev != pk.Stored {
		return fmt.Errorf("blocks end at %d, the part stores %d bytes", prev, pk.Stored)
	}
	return nil
}
