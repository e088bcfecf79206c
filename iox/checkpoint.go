package iox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/k3go/k3/tensor"
)

// ErrNotFound reports a tensor that the checkpoint does not contain.
var ErrNotFound = errors.New("tensor not found")

// ErrCheckpoint reports a checkpoint directory that is inconsistent: no
// shards, a shard named by the index that is missing, a tensor stored in
// two shards, an index that disagrees with the shards.
var ErrCheckpoint = errors.New("invalid checkpoint")

// IndexFile is the name of the optional shard index.
const IndexFile = "model.safetensors.index.json"

// Shard is one safetensors file of a checkpoint.
type Shard struct {
	Name   string // file name inside the checkpoint directory
	Path   string
	File   *os.File
	Header *Header
}

// Entry locates one tensor: its shard and its description.
type Entry struct {
	Shard int
	TensorInfo
}

// Checkpoint is an indexed set of safetensors shards.
type Checkpoint struct {
	Dir     string
	Shards  []*Shard
	tensors map[string]Entry

	fpOnce sync.Once // Fingerprint, computed on first use
	fp     string
	fpErr  error
}

// OpenCheckpoint indexes every *.safetensors file of dir (sorted by name).
// If model.safetensors.index.json exists, every shard it names must exist
// and hold the tensors the index assigns to it; the index is not required.
// A tensor found in two shards is an error.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	return OpenCheckpointContext(context.Background(), dir)
}

// MaxTotalHeaderBytes bounds the JSON headers of all shards together:
// parsing costs about twelve times a header's size, so a limit per file
// alone would let many shards exhaust memory. The released checkpoint's
// headers total under 100 MiB.
const MaxTotalHeaderBytes = 256 << 20

// totalHeaderLimit is MaxTotalHeaderBytes; tests lower it.
var totalHeaderLimit int64 = MaxTotalHeaderBytes

// OpenCheckpointContext is OpenCheckpoint with a context checked between
// files. Only regular files are opened (symlinks to them are fine): a
// FIFO or a device named like a shard or the index is an error.
func OpenCheckpointContext(ctx context.Context, dir string) (*Checkpoint, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	c := &Checkpoint{Dir: dir, tensors: make(map[string]Entry)}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	index, err := readIndex(dir)
	if err != nil {
		return nil, err
	}
	if index != nil {
		have := make(map[string]bool, len(names))
		for _, n := range names {
			have[n] = true
		}
		err := index.check(func(es []indexEntry) error {
			for _, e := range es {
				if err := checkShardName(e, index.path); err != nil {
					return err
				}
			}
			for _, e := range es {
				if !have[e.shard] {
					return fmt.Errorf("checkpoint %s: %w: shard %s named by %s is missing", dir, ErrCheckpoint, e.shard, IndexFile)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("checkpoint %s: %w: no *.safetensors files", dir, ErrCheckpoint)
	}
	var headers int64 // header bytes read so far, over every shard
	count := 0
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		p := filepath.Join(dir, n)
		f, st, err := OpenRegular(p)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", dir, wrapNotRegular(err))
		}
		s := &Shard{Name: n, Path: p, File: f}
		c.Shards = append(c.Shards, s)
		hn, err := headerLen(f, st.Size(), p)
		if err != nil {
			return nil, err
		}
		if headers += hn; headers > totalHeaderLimit {
			return nil, fmt.Errorf("checkpoint %s: %w: the shard headers up to %s hold %d bytes, above the %d-byte limit for all shards together", dir, ErrFormat, n, headers, totalHeaderLimit)
		}
		h, err := ReadHeader(f, st.Size(), p)
		if err != nil {
			return nil, err
		}
		s.Header = h
		count += len(h.Tensors)
	}
	// The map is built once every header is read, at its final size: the
	// released checkpoint's 497,220 entries would otherwise be rehashed
	// a dozen times.
	c.tensors = make(map[string]Entry, count)
	for i, s := range c.Shards {
		for _, t := range s.Header.Tensors {
			if prev, dup := c.tensors[t.Name]; dup {
				return nil, fmt.Errorf("checkpoint %s: %w: tensor %q is in both %s and %s", dir, ErrCheckpoint, t.Name, c.Shards[prev.Shard].Name, s.Name)
			}
			c.tensors[t.Name] = Entry{Shard: i, TensorInfo: t}
		}
	}
	if index != nil {
		err := index.check(func(es []indexEntry) error {
			for _, ie := range es {
				e, found := c.tensors[ie.tensor]
				if !found {
					return fmt.Errorf("checkpoint %s: %w: %s lists tensor %q in %s, which does not hold it", dir, ErrCheckpoint, IndexFile, ie.tensor, ie.shard)
				}
				if c.Shards[e.Shard].Name != ie.shard {
					return fmt.Errorf("checkpoint %s: %w: %s puts tensor %q in %s but it is in %s", dir, ErrCheckpoint, IndexFile, ie.tensor, ie.shard, c.Shards[e.Shard].Name)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// shardIndex is model.safetensors.index.json: its weight map says which
// shard holds each tensor.
type shardIndex struct {
	WeightMap map[string]string `json:"weight_map"`
}

// indexEntry is one tensor of the weight map and its shard.
type indexEntry struct{ tensor, shard string }

// entries returns the weight map's entries, by tensor name.
func (x *shardIndex) entries() []indexEntry {
	out := make([]indexEntry, 0, len(x.WeightMap))
	for t, s := range x.WeightMap {
		out = append(out, indexEntry{t, s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].tensor < out[j].tensor })
	return out
}

// maxIndexBytes bounds the index file k3 will read.
const maxIndexBytes = 512 << 20

// readIndex reads the index of dir, nil if there is none.
func readIndex(dir string) (*indexFile, error) {
	p := filepath.Join(dir, IndexFile)
	data, err := ReadFileLimit(p, maxIndexBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	case err != nil:
		return nil, fmt.Errorf("checkpoint %s: %w", dir, wrapNotRegular(err))
	}
	return loadIndex(data, p)
}

// indexFile is a read index, to check the shards against: its entries as
// the scanner read them (in file order, a name listed twice listed
// twice), or, when the file is outside the scanner's subset, as
// encoding/json decodes them (parseIndex: a name listed twice counts once,
// with its last shard).
type indexFile struct {
	entries []indexEntry
	decoded bool
	data    []byte
	path    string
}

// loadIndex reads an index's entries, with the scanner when it can.
func loadIndex(data []byte, path string) (*indexFile, error) {
	if es, ok := scanIndex(data); ok {
		return &indexFile{entries: es, data: data, path: path}, nil
	}
	x, err := parseIndex(data, path)
	if err != nil {
		return nil, err
	}
	return &indexFile{entries: x.entries(), decoded: true, path: path}, nil
}

// check runs f over the index's entries. The scanned entries hold every
// decoded one, so they pass whenever the decoded ones would; when they
// fail, the decoded entries decide, and the index is checked exactly as
// parseIndex reads it.
func (x *indexFile) check(f func([]indexEntry) error) error {
	err := f(x.entries)
	if err == nil || x.decoded {
		return err
	}
	d, perr := parseIndex(x.data, x.path)
	if perr != nil {
		return perr
	}
	x.entries, x.decoded, x.data = d.entries(), true, nil
	return f(x.entries)
}

// scanIndex reads an index's weight map with the scanner: the entries in
// file order, or false for a file outside its subset (see scanner) or
// with no exact "weight_map" key, whatever parseIndex would say of it.
func scanIndex(data []byte) ([]indexEntry, bool) {
	s := &scanner{b: data}
	if !s.eat('{') {
		return nil, false
	}
	var es []indexEntry
	found := false
	if !s.eat('}') {
		for {
			key, ok := s.str()
			if !ok || !s.eat(':') {
				return nil, false
			}
			switch {
			case string(key) == "weight_map" && !found:
				if es, ok = s.weightMap(); !ok {
					return nil, false
				}
				found = true
			case bytes.EqualFold(key, []byte("weight_map")):
				return nil, false // encoding/json would take it for the field, or merge it
			default:
				if !s.skip(0) {
					return nil, false
				}
			}
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return nil, false
			}
		}
	}
	return es, found && s.end()
}

// weightMap reads the weight map's object of tensor → shard.
func (s *scanner) weightMap() ([]indexEntry, bool) {
	if !s.eat('{') {
		return nil, false
	}
	es := make([]indexEntry, 0, len(s.b)/64)
	if s.eat('}') {
		return es, true
	}
	shards := map[string]string{} // a few distinct names, interned
	for {
		t, ok := s.str()
		if !ok || !s.eat(':') {
			return nil, false
		}
		sh, ok := s.str()
		if !ok {
			return nil, false
		}
		name, seen := shards[string(sh)]
		if !seen {
			name = string(sh)
			shards[name] = name
		}
		es = append(es, indexEntry{string(t), name})
		if s.eat('}') {
			return es, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// wrapNotRegular marks a FIFO or device in the checkpoint as an invalid
// checkpoint; other errors (permissions, I/O) stay as they are.
func wrapNotRegular(err error) error {
	if errors.Is(err, ErrNotRegular) {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return err
}

// parseIndex parses model.safetensors.index.json with encoding/json. Shard
// names must be plain file names ending in .safetensors (no directories).
func parseIndex(data []byte, name string) (*shardIndex, error) {
	if len(data) > maxIndexBytes {
		return nil, fmt.Errorf("%s: %w: index larger than %d bytes", name, ErrCheckpoint, maxIndexBytes)
	}
	var x shardIndex
	if err := json.Unmarshal(data, &x); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrCheckpoint, err)
	}
	if x.WeightMap == nil {
		return nil, fmt.Errorf("%s: %w: no weight_map", name, ErrCheckpoint)
	}
	for _, e := range x.entries() {
		if err := checkShardName(e, name); err != nil {
			return nil, err
		}
	}
	return &x, nil
}

// checkShardName refuses a shard name that is not a plain file name ending
// in .safetensors.
func checkShardName(e indexEntry, index string) error {
	if s := e.shard; s == "" || s != filepath.Base(s) || s == "." || s == ".." || !strings.HasSuffix(s, ".safetensors") {
		return fmt.Errorf("%s: %w: tensor %q maps to bad shard name %q", index, ErrCheckpoint, e.tensor, s)
	}
	return nil
}

// Lookup returns where a tensor is stored.
func (c *Checkpoint) Lookup(name string) (Entry, bool) {
	e, ok := c.tensors[name]
	return e, ok
}

// Names returns every tensor name, sorted.
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.tensors))
	for n := range c.tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Len returns the number of tensors.
func (c *Checkpoint) Len() int { return len(c.tensors) }

// Read reads a whole tensor into a new view. Use it for small tensors; the
// engine reads large ones into its own buffers.
func (c *Checkpoint) Read(name string) (tensor.Tensor, error) {
	e, ok := c.tensors[name]
	if !ok {
		return tensor.Tensor{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	if e.DType == tensor.Invalid {
		return tensor.Tensor{}, fmt.Errorf("tensor %q: dtype %s is not supported", name, e.Stored)
	}
	buf := make([]byte, e.Size)
	if err := c.ReadRange(e.Shard, e.Offset, buf); err != nil {
		return tensor.Tensor{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	return tensor.Tensor{DType: e.DType, Shape: e.Shape, Data: buf}, nil
}

// ReadRange fills dst from shard s at offset off, failing on a short read
// with an error that names the file and offset.
func (c *Checkpoint) ReadRange(s int, off int64, dst []byte) error {
	sh := c.Shards[s]
	n, err := sh.File.ReadAt(dst, off)
	if n == len(dst) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%s: read %d bytes at offset %d: got %d: %w", sh.Path, len(dst), off, n, err)
}

// Close closes every shard.
func (c *Checkpoint) Close() error {
	var first error
	for _, s := range c.Shards {
		if s.File != nil {
			if err := s.File.Close(); err != nil && first == nil {
				first = err
			}
			s.File = nil
		}
	}
	return first
}
