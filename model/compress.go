package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/iox"
	"github.com/klauspost/compress/huff0"
)

// A compressed packed trunk stores each part's image in blocks of
// compBlockBytes that decode independently, so several cores decode one
// part at once. Trained BF16 weights use few of their 256 exponent values,
// so a block is split into its 16-bit words' exponent bytes, Huffman coded
// (huff0), and their sign and mantissa bits packed into one byte per word
// and stored as they are: the mantissa is close to uniform and would not
// shrink. Each block's decoded bytes carry a CRC-32C in the index, so a
// corrupted block is refused rather than decoded into wrong weights.
//
// A block in trunk.bin is a 4-byte header (mode, and the length of the
// exponent stream as 24 bits), the exponent stream, then n/2 sign+mantissa
// bytes. The modes say how the exponent stream is stored.
const (
	compBlockBytes = 256 << 10 // raw bytes per block; its exponent stream fits huff0's block limit
	compHeader     = 4

	compExpRaw  = 0 // exponent bytes stored as they are
	compExpHuff = 1 // huff0 4-stream
	compExpRLE  = 2 // one exponent value repeated; the stream is that byte
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// compPart is a compressed part's block table.
type compPart struct {
	stored int64    // bytes in trunk.bin
	block  int      // raw bytes per block (the last may be shorter)
	offs   []int64  // of each block inside the stored bytes; len(sizes)+1 entries
	crc    []uint32 // of each block's decoded bytes
}

func (c *compPart) blocks() int { return len(c.crc) }

// blockEncoder compresses blocks; one per goroutine.
type blockEncoder struct {
	s       huff0.Scratch
	exp, sm []byte
}

// encodeBlock appends the encoded raw block (even length, at most
// compBlockBytes) to dst.
func (e *blockEncoder) encodeBlock(dst, raw []byte) []byte {
	n := len(raw) / 2
	if cap(e.exp) < n {
		e.exp, e.sm = make([]byte, n), make([]byte, n)
	}
	exp, sm := e.exp[:n], e.sm[:n]
	for i := range n {
		w := binary.LittleEndian.Uint16(raw[2*i:])
		exp[i] = byte(w >> 7)
		sm[i] = byte(w>>8)&0x80 | byte(w)&0x7f
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	mode := byte(compExpRaw)
	e.s.Reuse = huff0.ReusePolicyNone
	out, _, err := huff0.Compress4X(exp, &e.s)
	switch {
	case err == nil && len(out) < n:
		mode = compExpHuff
		dst = append(dst, out...)
	case errors.Is(err, huff0.ErrUseRLE):
		mode = compExpRLE
		dst = append(dst, exp[0])
	default:
		dst = append(dst, exp...)
	}
	el := len(dst) - start - compHeader
	dst[start] = mode
	dst[start+1], dst[start+2], dst[start+3] = byte(el), byte(el>>8), byte(el>>16)
	return append(dst, sm...)
}

// blockDecoder decodes blocks; one per goroutine.
type blockDecoder struct {
	s   *huff0.Scratch
	exp []byte
}

var errBlockCorrupt = errors.New("corrupt block")

// decodeBlock decodes one stored block into dst (the block's raw length).
func (d *blockDecoder) decodeBlock(dst, src []byte) error {
	n := len(dst) / 2
	if len(dst)%2 != 0 || len(src) < compHeader {
		return errBlockCorrupt
	}
	mode := src[0]
	el := int(src[1]) | int(src[2])<<8 | int(src[3])<<16
	if compHeader+el+n != len(src) {
		return errBlockCorrupt
	}
	es, sm := src[compHeader:compHeader+el], src[compHeader+el:]
	var exp []byte
	switch mode {
	case compExpRaw:
		if el != n {
			return errBlockCorrupt
		}
		exp = es
	case compExpRLE:
		if el != 1 {
			return errBlockCorrupt
		}
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		exp = d.exp[:n]
		for i := range exp {
			exp[i] = es[0]
		}
	case compExpHuff:
		if d.s == nil {
			d.s = &huff0.Scratch{}
		}
		s, rest, err := huff0.ReadTable(es, d.s)
		if err != nil {
			return errBlockCorrupt
		}
		d.s = s
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		out, err := s.Decoder().Decompress4X(d.exp[:0:n], rest)
		if err != nil || len(out) != n {
			return errBlockCorrupt
		}
		exp = out
	default:
		return errBlockCorrupt
	}
	mergeWords(dst, exp, sm)
	return nil
}

// mergeWords rebuilds the 16-bit words from exponent and sign+mantissa
// bytes.
func mergeWords(dst, exp, sm []byte) {
	n := len(exp)
	dst = dst[:2*n]
	sm = sm[:n]
	for i := range n {
		e, m := uint16(exp[i]), uint16(sm[i])
		w := (m&0x80)<<8 | e<<7 | m&0x7f
		binary.LittleEndian.PutUint16(dst[2*i:], w)
	}
}

// compressImage encodes a part image (even length) into blocks, returning
// the stored bytes and the block table.
func compressImage(enc *blockEncoder, dst, img []byte) ([]byte, *compPart) {
	c := &compPart{block: compBlockBytes}
	start := len(dst)
	for off := 0; off < len(img); off += compBlockBytes {
		raw := img[off:min(off+compBlockBytes, len(img))]
		c.offs = append(c.offs, int64(len(dst)-start))
		c.crc = append(c.crc, crc32.Checksum(raw, crcTable))
		dst = enc.encodeBlock(dst, raw)
	}
	c.offs = append(c.offs, int64(len(dst)-start))
	c.stored = int64(len(dst) - start)
	return dst, c
}

// decoders is a pool of goroutines that decode a part's blocks in
// parallel. It is shared by every decode of one trunk; each decodeRun
// tells the workers which part to decode, so two ring slots can decode at
// once.
type decoders struct {
	jobs    chan *decodeRun
	workers int
	once    sync.Once
	quit    chan struct{}
}

// decodeRun is one part's decode: workers take blocks by index.
type decodeRun struct {
	dst, src []byte
	cp       *compPart
	next     atomic.Int64
	failed   atomic.Int64 // 1 + the index of a failed block, 0 if none
	wg       sync.WaitGroup
	nanos    int64 // wall time of the last decode
}

func newDecoders(workers int) *decoders {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &decoders{jobs: make(chan *decodeRun, workers), workers: workers, quit: make(chan struct{})}
}

func (ds *decoders) start() {
	for range ds.workers {
		go ds.work()
	}
}

func (ds *decoders) work() {
	var d blockDecoder
	for {
		select {
		case r := <-ds.jobs:
			r.decodeSome(&d)
			r.wg.Done()
		case <-ds.quit:
			return
		}
	}
}

func (r *decodeRun) decodeSome(d *blockDecoder) {
	nb := int64(r.cp.blocks())
	for {
		b := r.next.Add(1) - 1
		if b >= nb || r.failed.Load() != 0 {
			return
		}
		lo := b * int64(r.cp.block)
		hi := min(lo+int64(r.cp.block), int64(len(r.dst)))
		out := r.dst[lo:hi]
		if d.decodeBlock(out, r.src[r.cp.offs[b]:r.cp.offs[b+1]]) != nil || crc32.Checksum(out, crcTable) != r.cp.crc[b] {
			r.failed.CompareAndSwap(0, b+1)
			return
		}
	}
}

// decode decodes the stored bytes src of a part into dst, using every
// worker. It returns the index of a block that failed to decode or match
// its checksum, or -1.
func (ds *decoders) decode(r *decodeRun, dst, src []byte, cp *compPart) int {
	ds.once.Do(ds.start)
	start := time.Now()
	defer func() { r.nanos = int64(time.Since(start)) }()
	r.dst, r.src, r.cp = dst, src, cp
	r.next.Store(0)
	r.failed.Store(0)
	n := min(ds.workers, cp.blocks())
	r.wg.Add(n)
	for range n {
		ds.jobs <- r
	}
	r.wg.Wait()
	r.dst, r.src, r.cp = nil, nil, nil
	return int(r.failed.Load()) - 1
}

// close stops the workers.
func (ds *decoders) close() {
	select {
	case <-ds.quit:
	default:
		close(ds.quit)
	}
}

// decodePart checks the stored bytes of a compressed part and decodes them
// into buf.
func (p *Plan) decodePart(ds *decoders, r *decodeRun, pp *partPlan, buf, stage []byte) error {
	cp := pp.comp
	if b := ds.decode(r, buf[:pp.bytes], stage[:cp.stored], cp); b >= 0 {
		return fmt.Errorf("%w: packed trunk layer %d %s: block %d of %d does not decode to its checksum (the file is corrupt; pack it again)",
			ErrBadCheckpoint, pp.layer, pp.part, b, cp.blocks())
	}
	return nil
}

// partLoader reads parts into their buffers, decoding the parts of a
// compressed packed trunk through a staging buffer.
type partLoader struct {
	plan *Plan
	read ReadFunc
	dec  *decoders // nil when no part is compressed
}

func newPartLoader(p *Plan, read ReadFunc) *partLoader {
	l := &partLoader{plan: p, read: read}
	if p.stagingBytes() > 0 {
		l.dec = newDecoders(0)
	}
	return l
}

// load reads part pp into buf; stage and run are needed for a compressed
// part. It returns the bytes read from disk.
func (l *partLoader) load(ctx context.Context, pp *partPlan, buf, stage []byte, run *decodeRun) (int64, error) {
	var n int64
	if pp.comp == nil {
		for _, e := range pp.extents {
			if err := l.read(ctx, e, buf); err != nil {
				return n, err
			}
			n += e.Size
		}
		return n, nil
	}
	if int64(len(stage)) < iox.AlignUp(pp.comp.stored) {
		return 0, fmt.Errorf("staging buffer of %d bytes for a %d-byte compressed part", len(stage), pp.comp.stored)
	}
	for _, e := range pp.extents {
		if err := l.read(ctx, e, stage); err != nil {
			return n, err
		}
		n += e.Size
	}
	return n, l.plan.decodePart(l.dec, run, pp, buf, stage)
}

func (l *partLoader) close() {
	if l.dec != nil {
		l.dec.close()
	}
}
