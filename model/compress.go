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
// bytes, eight words per step: the bytes are spread into 16-bit lanes of
// a uint64 and combined with lane-wise masks and shifts (no lane
// overflows: an exponent shifted by 7 stays under bit 15).
func mergeWords(dst, exp, sm []byte) {
	n := len(exp)
	dst = dst[:2*n]
	sm = sm[:n]
	for len(exp) >= 8 && len(sm) >= 8 && len(dst) >= 16 {
		e := binary.LittleEndian.Uint64(exp)
		m := binary.LittleEndian.Uint64(sm)
		binary.LittleEndian.PutUint64(dst, mergeLanes(uint32(e), uint32(m)))
		binary.LittleEndian.PutUint64(dst[8:], mergeLanes(uint32(e>>32), uint32(m>>32)))
		exp, sm, dst = exp[8:], sm[8:], dst[16:]
	}
	for i := range exp {
		e, m := uint16(exp[i]), uint16(sm[i])
		binary.LittleEndian.PutUint16(dst[2*i:], (m&0x80)<<8|e<<7|m&0x7f)
	}
}

// mergeLanes combines four exponent and four sign+mantissa bytes into four
// little-endian 16-bit words.
func mergeLanes(e4, m4 uint32) uint64 {
	e, m := spread16(e4), spread16(m4)
	return (m&0x0080008000800080)<<8 | e<<7 | m&0x007f007f007f007f
}

// spread16 moves byte k of v to the low byte of 16-bit lane k.
func spread16(v uint32) uint64 {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	return (x | x<<8) & 0x00ff00ff00ff00ff
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

// decodeRun is one part's decode: workers take blocks by index, each as
// soon as the stored bytes it needs have been read (ready), so decoding
// the first blocks overlaps reading the last.
type decodeRun struct {
	dst, src []byte
	cp       *compPart
	next     atomic.Int64
	failed   atomic.Int64 // 1 + the index of a failed block, 0 if none
	wg       sync.WaitGroup
	nanos    int64        // wall time of the last decode, read included
	cpu      atomic.Int64 // decode time summed over blocks (per core), last decode

	mu      sync.Mutex
	cond    sync.Cond
	ready   int64 // stored bytes read so far (a prefix)
	aborted bool  // the read failed: stop
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
		if !r.wait(r.cp.offs[b+1]) {
			return
		}
		lo := b * int64(r.cp.block)
		hi := min(lo+int64(r.cp.block), int64(len(r.dst)))
		out := r.dst[lo:hi]
		t0 := time.Now()
		bad := d.decodeBlock(out, r.src[r.cp.offs[b]:r.cp.offs[b+1]]) != nil || crc32.Checksum(out, crcTable) != r.cp.crc[b]
		r.cpu.Add(int64(time.Since(t0)))
		if bad {
			r.failed.CompareAndSwap(0, b+1)
			return
		}
	}
}

// wait blocks until n stored bytes are read; false if the read failed.
func (r *decodeRun) wait(n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.ready < n && !r.aborted {
		r.cond.Wait()
	}
	return !r.aborted
}

// setReady publishes the read prefix (or, with abort, a failed read).
func (r *decodeRun) setReady(n int64, abort bool) {
	r.mu.Lock()
	r.ready = max(r.ready, n)
	r.aborted = r.aborted || abort
	r.cond.Broadcast()
	r.mu.Unlock()
}

// begin starts decoding src into dst on every worker; the caller then
// publishes the stored bytes with setReady as they arrive and calls end.
func (ds *decoders) begin(r *decodeRun, dst, src []byte, cp *compPart) {
	ds.once.Do(ds.start)
	if r.cond.L == nil {
		r.cond.L = &r.mu
	}
	r.dst, r.src, r.cp = dst, src, cp
	r.next.Store(0)
	r.failed.Store(0)
	r.cpu.Store(0)
	r.ready, r.aborted = 0, false
	n := min(ds.workers, cp.blocks())
	r.wg.Add(n)
	for range n {
		ds.jobs <- r
	}
}

// end waits for the workers and returns the index of a block that failed
// to decode or match its checksum, or -1.
func (ds *decoders) end(r *decodeRun) int {
	r.wg.Wait()
	r.dst, r.src, r.cp = nil, nil, nil
	return int(r.failed.Load()) - 1
}

// decode decodes stored bytes already in memory.
func (ds *decoders) decode(r *decodeRun, dst, src []byte, cp *compPart) int {
	start := time.Now()
	ds.begin(r, dst, src, cp)
	r.setReady(cp.stored, false)
	b := ds.end(r)
	r.nanos = int64(time.Since(start))
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

// A compressed part is read in sub-reads of an eighth of it (at least 64
// KiB, at most 32 MiB), so that its first blocks decode while the rest is
// read. Two are in flight, each split by the reader into parallel chunks.
const (
	stageReadMin = 64 << 10
	stageReadMax = 32 << 20
)

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
	cp := pp.comp
	if int64(len(stage)) < iox.AlignUp(cp.stored) || len(pp.extents) != 1 || pp.extents[0].Off%Align != 0 {
		return 0, fmt.Errorf("staging buffer of %d bytes for a %d-byte compressed part", len(stage), cp.stored)
	}
	e := pp.extents[0]
	start := time.Now()
	l.dec.begin(run, buf[:pp.bytes], stage[:cp.stored], cp)
	// Two readers take alternate sub-reads; the prefix read is where the
	// slower one stands.
	stageRead := min(max(iox.AlignUp(cp.stored/8), stageReadMin), stageReadMax)
	nsub := int((cp.stored + stageRead - 1) / stageRead)
	var next [2]atomic.Int64 // the next sub-read of each reader
	next[0].Store(0)
	next[1].Store(1)
	var readErr [2]error
	reader := func(w int) {
		for k := w; k < nsub; k += 2 {
			off := int64(k) * stageRead
			x := Extent{File: e.File, Off: e.Off + off, Size: min(stageRead, cp.stored-off), Region: off, BufOff: off}
			if err := l.read(ctx, x, stage); err != nil {
				readErr[w] = err
				run.setReady(0, true)
				return
			}
			next[w].Store(int64(k + 2))
			run.setReady(min(min(next[0].Load(), next[1].Load())*stageRead, cp.stored), false)
		}
		next[w].Store(int64(nsub + 1))
		run.setReady(min(min(next[0].Load(), next[1].Load())*stageRead, cp.stored), false)
	}
	var wg sync.WaitGroup
	if nsub > 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reader(1)
		}()
	} else {
		next[1].Store(int64(nsub + 1))
	}
	reader(0)
	wg.Wait()
	failed := l.dec.end(run)
	run.nanos = int64(time.Since(start))
	for _, err := range readErr {
		if err != nil {
			return 0, err
		}
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
