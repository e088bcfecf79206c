package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/platform/kernel/bf16merge"
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
// tells the workers which part to decode.
type decoders struct {
	jobs    chan *decodeRun
	workers int
	once    sync.Once
	quit    chan struct{}
}

// A compressed part decodes in place: its stored bytes are read into the
// tail of the part's own buffer, and the blocks decode from there into the
// head, in order, each block's image landing before its stored bytes (the
// tail starts far enough in: compRoom). No staging buffer is needed, so
// the reads are not limited by one: readers readers keep a piece of
// pieceBytes each in flight, as many as a plain part's read has, and the
// workers decode every block whose stored bytes have arrived. Only near
// the end of a part, where the image catches up with the stored bytes, does
// a block wait for the blocks before it (whose stored bytes its image
// overwrites), and copy its own stored bytes aside first when its image
// overlaps them.
const (
	pieceBytes = 8 << 20
	readers    = 8
)

// compRoom is the buffer a compressed part of n image bytes needs to
// decode in place, and where in it the stored bytes' aligned window goes
// (tail): every block's stored bytes start at or after its image's start.
func compRoom(n int64, cp *compPart, ext Extent) (room, tail int64) {
	wOff, wLen := ext.Window()
	pad := ext.Off - wOff
	var save int64 // the most the image runs ahead of the stored bytes
	for b := range cp.blocks() {
		save = max(save, int64(b)*int64(cp.block)-cp.offs[b])
	}
	tail = iox.AlignUp(max(0, save-pad))
	return max(iox.AlignUp(n), tail+wLen), tail
}

// decodeRun is one part's load: readers read the stored bytes piece by
// piece into the buffer's tail, workers take blocks by index and decode
// each once its stored bytes are in and its image's bytes are free.
type decodeRun struct {
	dst        []byte // the part's buffer: the image at [0, n)
	n          int
	cp         *compPart
	ext        Extent // the part's stored bytes
	tail, pad  int    // stored byte 0 is at dst[tail+pad]
	pieces     int
	next       atomic.Int64 // next block to take
	wg         sync.WaitGroup
	cpu        atomic.Int64 // decode time summed over blocks (core time), last load
	mu         sync.Mutex
	cond       sync.Cond
	nextPiece  int    // next piece to read
	arrived    []bool // by piece
	done       []bool // by block
	doneUpTo   int    // blocks [0, doneUpTo) are decoded
	failed     int    // 1 + the index of a failed block, 0 if none
	readErr    error
	wOff, wLen int64 // the stored bytes' aligned window in the file
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
	var aside []byte
	for {
		select {
		case r := <-ds.jobs:
			aside = r.decodeSome(&d, aside)
			r.wg.Done()
		case <-ds.quit:
			return
		}
	}
}

// stopped reports a failed read or block. r.mu must be held.
func (r *decodeRun) stopped() bool { return r.failed != 0 || r.readErr != nil }

// piecesOf returns the pieces [j0, j1] that hold buffer bytes [lo, hi)
// of the window (hi > lo), clipped to the window; ok is false when they
// lie outside it.
func (r *decodeRun) piecesOf(lo, hi int) (j0, j1 int, ok bool) {
	lo, hi = max(lo-r.tail, 0), min(hi-r.tail, int(r.wLen))
	if lo >= hi {
		return 0, 0, false
	}
	return lo / pieceBytes, (hi - 1) / pieceBytes, true
}

// in returns block b's stored bytes' range in dst.
func (r *decodeRun) in(b int) (int, int) {
	base := r.tail + r.pad
	return base + int(r.cp.offs[b]), base + int(r.cp.offs[b+1])
}

// ready reports whether block b may decode now: its stored bytes have
// arrived, and every byte its image will overwrite has arrived and is no
// longer needed by an earlier block. own says that the image overlaps
// b's own stored bytes. r.mu must be held.
func (r *decodeRun) ready(b int) (ok, own bool) {
	inLo, inHi := r.in(b)
	if j0, j1, ok := r.piecesOf(inLo, inHi); ok {
		for j := j0; j <= j1; j++ {
			if !r.arrived[j] {
				return false, false
			}
		}
	}
	outLo := b * r.cp.block
	outHi := min(outLo+r.cp.block, r.n)
	if j0, j1, ok := r.piecesOf(outLo, outHi); ok {
		for j := j0; j <= j1; j++ {
			if !r.arrived[j] {
				return false, false
			}
		}
	}
	// Stored bytes run in block order, each block's at or after its
	// image's start, so the blocks whose stored bytes b's image
	// overwrites are those up to last, the last to start before the
	// image ends: all before b must be decoded (they are, but for the
	// last few blocks of a part, where the image catches up with the
	// stored bytes), and b's own stored bytes go aside first.
	base := int64(r.tail + r.pad)
	last := sort.Search(r.cp.blocks(), func(c int) bool { return base+r.cp.offs[c] >= int64(outHi) }) - 1
	if last < 0 {
		return true, false
	}
	if r.doneUpTo < min(last, b-1)+1 {
		return false, false
	}
	return true, last >= b
}

func (r *decodeRun) decodeSome(d *blockDecoder, aside []byte) []byte {
	nb := r.cp.blocks()
	for {
		b := int(r.next.Add(1) - 1)
		if b >= nb {
			return aside
		}
		r.mu.Lock()
		ok, own := false, false
		for !r.stopped() {
			if ok, own = r.ready(b); ok {
				break
			}
			r.cond.Wait()
		}
		r.mu.Unlock()
		if !ok {
			return aside
		}
		inLo, inHi := r.in(b)
		src := r.dst[inLo:inHi]
		if own {
			aside = append(aside[:0], src...)
			src = aside
		}
		lo := b * r.cp.block
		out := r.dst[lo:min(lo+r.cp.block, r.n)]
		t0 := time.Now()
		crc, err := d.decodeBlock(out, src)
		bad := err != nil || crc != r.cp.crc[b]
		r.cpu.Add(int64(time.Since(t0)))
		r.mu.Lock()
		if bad && r.failed == 0 {
			r.failed = b + 1
		}
		r.done[b] = true
		for r.doneUpTo < nb && r.done[r.doneUpTo] {
			r.doneUpTo++
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if bad {
			return aside
		}
		// Let a reader whose read has completed have this P: with every
		// P decoding, it would otherwise wait for the scheduler's
		// preemption (about 10 ms) before issuing the next read, and the
		// disk would idle.
		runtime.Gosched()
	}
}

// readPieces is one reader: it reads the next piece not yet taken until
// none is left.
func (r *decodeRun) readPieces(ctx context.Context, read ReadFunc) {
	S := r.cp.stored
	for {
		r.mu.Lock()
		j := r.nextPiece
		r.nextPiece++
		stop := r.stopped()
		r.mu.Unlock()
		if stop || j >= r.pieces {
			return
		}
		// Piece j covers stored bytes [lo, hi): the window's bytes
		// [j·pieceBytes, (j+1)·pieceBytes) less the alignment padding.
		lo := max(0, int64(j)*pieceBytes-int64(r.pad))
		hi := min(S, int64(j+1)*pieceBytes-int64(r.pad))
		x, w := iox.SingleExtent(r.ext.File, r.ext.Off+lo, hi-lo)
		at := r.tail + j*pieceBytes
		err := read(ctx, x, r.dst[at:at+int(w)])
		r.mu.Lock()
		if err != nil {
			if r.readErr == nil {
				r.readErr = err
			}
		} else {
			r.arrived[j] = true
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// run loads one compressed part of n image bytes into dst (compRoom bytes
// at least): it starts the workers, runs the readers and waits for both.
// It returns the index of a block that failed to decode or match its
// checksum (or -1) and the first read error.
//
// onRead, if not nil, is called once every piece is read (or a read
// failed), while the last blocks may still decode: the trunk starts the
// next part's reads then.
func (ds *decoders) run(ctx context.Context, r *decodeRun, read ReadFunc, dst []byte, n int64, cp *compPart, ext Extent, onRead func()) (int, error) {
	ds.once.Do(ds.start)
	if r.cond.L == nil {
		r.cond.L = &r.mu
	}
	room, tail := compRoom(n, cp, ext)
	if int64(len(dst)) < room {
		return -1, fmt.Errorf("model: a compressed part of %d bytes needs a buffer of %d, got %d", n, room, len(dst))
	}
	r.wOff, r.wLen = ext.Window()
	r.dst, r.n, r.cp, r.ext = dst, int(n), cp, ext
	r.tail, r.pad = int(tail), int(ext.Off-r.wOff)
	r.pieces = int((r.wLen + pieceBytes - 1) / pieceBytes)
	r.next.Store(0)
	r.cpu.Store(0)
	r.failed, r.readErr, r.nextPiece, r.doneUpTo = 0, nil, 0, 0
	r.arrived = resetBools(r.arrived, r.pieces)
	r.done = resetBools(r.done, cp.blocks())
	w := min(ds.workers, cp.blocks())
	r.wg.Add(w)
	for range w {
		ds.jobs <- r
	}
	var rd sync.WaitGroup
	for range min(readers, r.pieces) - 1 {
		rd.Add(1)
		go func() {
			defer rd.Done()
			r.readPieces(ctx, read)
		}()
	}
	r.readPieces(ctx, read)
	rd.Wait()
	if onRead != nil {
		onRead()
	}
	r.wg.Wait()
	r.dst, r.cp = nil, nil
	return r.failed - 1, r.readErr
}

// resetBools returns b with n false entries, reusing its array.
func resetBools(b []bool, n int) []bool {
	if cap(b) < n {
		return make([]bool, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// decode decodes stored bytes already in memory (src, as in the file)
// through the same path as a load, into dst (compRoom bytes at least; the
// image is dst[:n]).
func (ds *decoders) decode(r *decodeRun, dst []byte, n int64, src []byte, cp *compPart) int {
	read := func(_ context.Context, e Extent, buf []byte) error {
		copy(buf[e.BufOff:e.BufOff+e.Size], src[e.Off:e.Off+e.Size])
		return nil
	}
	b, _ := ds.run(context.Background(), r, read, dst, n, cp, Extent{Off: 0, Size: cp.stored}, nil)
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
// compressed packed trunk in place.
type partLoader struct {
	plan *Plan
	read ReadFunc
	dec  *decoders // nil when no part is compressed
}

func newPartLoader(p *Plan, read ReadFunc) *partLoader {
	l := &partLoader{plan: p, read: read}
	if p.compressed() {
		l.dec = newDecoders(0)
	}
	return l
}

// load reads part pp into buf (pp.room() bytes); run is needed for a
// compressed part. It returns the bytes read from disk. onRead, if not
// nil, may be called when the reads are done and only decoding is left.
func (l *partLoader) load(ctx context.Context, pp *partPlan, buf []byte, run *decodeRun, onRead func()) (int64, error) {
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
	if len(pp.extents) != 1 {
		return 0, fmt.Errorf("model: a compressed part has %d extents, want 1", len(pp.extents))
	}
	failed, err := l.dec.run(ctx, run, l.read, buf, pp.bytes, cp, pp.extents[0], onRead)
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
