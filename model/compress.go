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

	"github.com/k3go/k3/internal/bf16merge"
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
	compExpFix  = 3 // fixed-width k-bit codes into a per-block table (compress_fixed.go)
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
	fix     []byte // the fixed-width exponent stream being built
	// huffOnly turns the fixed-width mode off, as packs before it were
	// written (benchmarks compare the two in one process).
	huffOnly bool
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
	huffLen := n // the exponent stream's length without the fixed-width mode
	if err == nil && len(out) < n {
		huffLen = len(out)
	}
	if !e.huffOnly && !errors.Is(err, huff0.ErrUseRLE) {
		e.fix = encodeFixed(e.fix[:0], exp)
	}
	switch {
	case !e.huffOnly && !errors.Is(err, huff0.ErrUseRLE) && preferFixed(len(e.fix), huffLen, n):
		mode = compExpFix
		dst = append(dst, e.fix...)
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
	fix fixedTables
}

var errBlockCorrupt = errors.New("corrupt block")

// decodeBlock decodes one stored block into dst (the block's raw length)
// and returns the CRC-32C of the decoded bytes.
func (d *blockDecoder) decodeBlock(dst, src []byte) (uint32, error) {
	n := len(dst) / 2
	if len(dst)%2 != 0 || len(src) < compHeader {
		return 0, errBlockCorrupt
	}
	mode := src[0]
	el := int(src[1]) | int(src[2])<<8 | int(src[3])<<16
	if compHeader+el+n != len(src) {
		return 0, errBlockCorrupt
	}
	es, sm := src[compHeader:compHeader+el], src[compHeader+el:]
	var exp []byte
	switch mode {
	case compExpRaw:
		if el != n {
			return 0, errBlockCorrupt
		}
		exp = es
	case compExpRLE:
		if el != 1 {
			return 0, errBlockCorrupt
		}
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		exp = d.exp[:n]
		for i := range exp {
			exp[i] = es[0]
		}
	case compExpFix:
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		exp = d.exp[:n]
		if !d.fix.decode(exp, es) {
			return 0, errBlockCorrupt
		}
	case compExpHuff:
		if d.s == nil {
			d.s = &huff0.Scratch{}
		}
		s, rest, err := huff0.ReadTable(es, d.s)
		if err != nil {
			return 0, errBlockCorrupt
		}
		d.s = s
		if cap(d.exp) < n {
			d.exp = make([]byte, n)
		}
		out, err := s.Decoder().Decompress4X(d.exp[:0:n], rest)
		if err != nil || len(out) != n {
			return 0, errBlockCorrupt
		}
		exp = out
	default:
		return 0, errBlockCorrupt
	}
	return mergeWords(dst, exp, sm), nil
}

// mergeChunk is the number of words merged before their bytes are
// checksummed: 16 KiB of output, so the CRC reads it from L1 right after
// the merge wrote it instead of from L2 or memory after the whole block.
const mergeChunk = 8 << 10

// mergeWords rebuilds the 16-bit words from exponent and sign+mantissa
// bytes into dst (2*len(exp) bytes) and returns the CRC-32C of dst.
func mergeWords(dst, exp, sm []byte) uint32 {
	var crc uint32
	for i := 0; i < len(exp); i += mergeChunk {
		j := min(i+mergeChunk, len(exp))
		out := dst[2*i : 2*j]
		bf16merge.Merge(out, exp[i:j], sm[i:j])
		crc = crc32.Update(crc, crcTable, out)
	}
	return crc
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
	stage   []byte // decode's staging, one caller at a time
}

// A compressed part is read through a staging buffer of stageSlots slots
// that each hold one chunk: chunkBlocks consecutive blocks (fewer for
// small parts, so that even they overlap reading and decoding).
// stageReader readers fill the slots in turn while the workers decode the
// blocks of the chunks already read; a slot is read again once all its
// blocks are decoded. The staging buffer so costs a few chunks, not a
// whole part. Once the fixed-width mode made the decode faster than the
// disk, the reads became the limit: four reads of 8 MiB chunks in flight
// kept the disk busier than two of 16 MiB in the same staging bytes
// (medium: 0.869× of plain s/token against 0.898×; eight of 4 MiB were
// slower, 0.99×; docs/PERFORMANCE.md §11).
const (
	chunkBlocks = 32 // 8 MiB of raw bytes
	stageSlots  = 8
	stageReader = 4
)

// chunkSlotBytes is the size of a staging slot for the part's chunks: the
// largest aligned read window of one of its chunks.
func chunkSlotBytes(cp *compPart) int64 {
	k, nb := chunkLen(cp.blocks()), cp.blocks()
	var n int64
	for b0 := 0; b0 < nb; b0 += k {
		b1 := min(b0+k, nb)
		// The window may start up to Align-1 bytes before the chunk.
		n = max(n, iox.AlignUp(cp.offs[b1]-cp.offs[b0]+Align))
	}
	return n
}

// chunkLen is the number of blocks per chunk of a part of nb blocks.
func chunkLen(nb int) int { return min(chunkBlocks, max(1, nb/8)) }

// decodeRun is one part's load: readers fill the staging slots with
// chunks, workers take blocks by index and decode each once its chunk is
// in.
type decodeRun struct {
	dst   []byte
	cp    *compPart
	stage []byte
	ext   Extent // the part's stored bytes
	k     int    // blocks per chunk
	slot  int    // bytes per staging slot
	next  atomic.Int64
	wg    sync.WaitGroup
	cpu   atomic.Int64 // decode time summed over blocks (core time), last load

	mu      sync.Mutex
	cond    sync.Cond
	inSlot  [stageSlots]int // chunk read into each slot, -1 if none
	decoded [stageSlots]int // blocks of that chunk decoded
	failed  int             // 1 + the index of a failed block, 0 if none
	readErr error
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

// stopped reports a failed read or block. r.mu must be held.
func (r *decodeRun) stopped() bool { return r.failed != 0 || r.readErr != nil }

// chunkBlocksOf returns chunk c's blocks [b0, b1).
func (r *decodeRun) chunkBlocksOf(c int) (int, int) {
	return c * r.k, min((c+1)*r.k, r.cp.blocks())
}

// window is chunk c's read: its stored bytes and where they land in a slot.
func (r *decodeRun) window(c int) Extent {
	b0, b1 := r.chunkBlocksOf(c)
	off := r.ext.Off + r.cp.offs[b0]
	x, _ := iox.SingleExtent(r.ext.File, off, r.cp.offs[b1]-r.cp.offs[b0])
	return x
}

func (r *decodeRun) decodeSome(d *blockDecoder) {
	nb := r.cp.blocks()
	for {
		b := int(r.next.Add(1) - 1)
		if b >= nb {
			return
		}
		c := b / r.k
		slot := c % stageSlots
		r.mu.Lock()
		for r.inSlot[slot] != c && !r.stopped() {
			r.cond.Wait()
		}
		stop := r.stopped()
		r.mu.Unlock()
		if stop {
			return
		}
		b0, _ := r.chunkBlocksOf(c)
		base := slot*r.slot + int(r.window(c).BufOff) - int(r.cp.offs[b0])
		src := r.stage[base+int(r.cp.offs[b]) : base+int(r.cp.offs[b+1])]
		lo := b * r.cp.block
		out := r.dst[lo:min(lo+r.cp.block, len(r.dst))]
		t0 := time.Now()
		crc, err := d.decodeBlock(out, src)
		bad := err != nil || crc != r.cp.crc[b]
		r.cpu.Add(int64(time.Since(t0)))
		r.mu.Lock()
		if bad && r.failed == 0 {
			r.failed = b + 1
		}
		r.decoded[slot]++
		r.cond.Broadcast()
		r.mu.Unlock()
		if bad {
			return
		}
		// Let a reader whose read has completed have this P: with every
		// P decoding, it would otherwise wait for the scheduler's
		// preemption (about 10 ms) before issuing the next read, and the
		// disk would idle.
		runtime.Gosched()
	}
}

// readChunks is one reader: chunks w, w+stageReader, ... each into its
// slot once the slot's previous chunk is decoded.
func (r *decodeRun) readChunks(ctx context.Context, read ReadFunc, w int) {
	nc := (r.cp.blocks() + r.k - 1) / r.k
	for c := w; c < nc; c += stageReader {
		slot := c % stageSlots
		r.mu.Lock()
		for !r.stopped() && r.inSlot[slot] >= 0 {
			prev := r.inSlot[slot]
			b0, b1 := r.chunkBlocksOf(prev)
			if r.decoded[slot] == b1-b0 {
				break
			}
			r.cond.Wait()
		}
		stop := r.stopped()
		r.mu.Unlock()
		if stop {
			return
		}
		buf := r.stage[slot*r.slot : (slot+1)*r.slot]
		err := read(ctx, r.window(c), buf)
		r.mu.Lock()
		if err != nil {
			if r.readErr == nil {
				r.readErr = err
			}
		} else {
			r.inSlot[slot], r.decoded[slot] = c, 0
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// run loads one compressed part: it starts the workers, runs the readers
// and waits for both. It returns the index of a block that failed to
// decode or match its checksum (or -1) and the first read error.
func (ds *decoders) run(ctx context.Context, r *decodeRun, read ReadFunc, dst, stage []byte, cp *compPart, ext Extent) (int, error) {
	ds.once.Do(ds.start)
	if r.cond.L == nil {
		r.cond.L = &r.mu
	}
	r.dst, r.cp, r.stage, r.ext, r.k = dst, cp, stage, ext, chunkLen(cp.blocks())
	r.slot = len(stage) / stageSlots
	r.next.Store(0)
	r.cpu.Store(0)
	r.failed, r.readErr = 0, nil
	for i := range r.inSlot {
		r.inSlot[i], r.decoded[i] = -1, 0
	}
	n := min(ds.workers, cp.blocks())
	r.wg.Add(n)
	for range n {
		ds.jobs <- r
	}
	var readers sync.WaitGroup
	for w := 1; w < stageReader; w++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			r.readChunks(ctx, read, w)
		}()
	}
	r.readChunks(ctx, read, 0)
	readers.Wait()
	r.wg.Wait()
	r.dst, r.cp, r.stage = nil, nil, nil
	return r.failed - 1, r.readErr
}

// decode decodes stored bytes already in memory (src, as in the file),
// through the same path as a load.
func (ds *decoders) decode(r *decodeRun, dst, src []byte, cp *compPart) int {
	if n := int(stageSlots * chunkSlotBytes(cp)); len(ds.stage) < n {
		ds.stage = make([]byte, n)
	}
	stage := ds.stage
	read := func(_ context.Context, e Extent, buf []byte) error {
		copy(buf[e.BufOff:e.BufOff+e.Size], src[e.Off:e.Off+e.Size])
		return nil
	}
	b, _ := ds.run(context.Background(), r, read, dst, stage, cp, Extent{Off: 0, Size: cp.stored})
	return b
}

// close stops the workers.
func (ds *decoders) close() {
	select {
	case <-ds.quit:
	default:
		close(ds.quit)
	}
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

// load reads part pp into buf; stage (stageBytes) and run are needed for a
// compressed part. It returns the bytes read from disk.
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
	cp := pp.comp
	if int64(len(stage)) < stageSlots*chunkSlotBytes(cp) || len(pp.extents) != 1 {
		return 0, fmt.Errorf("staging buffer of %d bytes, want %d", len(stage), stageSlots*chunkSlotBytes(cp))
	}
	failed, err := l.dec.run(ctx, run, l.read, buf[:pp.bytes], stage, cp, pp.extents[0])
	if err != nil {
		return 0, err
	}
	if failed >= 0 {
		return cp.stored, fmt.Errorf("%w: packed trunk layer %d %s: block %d of %d does not decode to its checksum (the file is corrupt; pack it again)",
			ErrBadCheckpoint, pp.layer, pp.part, failed, cp.blocks())
	}
	return cp.stored, nil
}

func (l *partLoader) close() {
	if l.dec != nil {
		l.dec.close()
	}
}
