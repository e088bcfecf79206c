package trunk

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3/internal/platform/crash"
	"github.com/k3go/k3/iox"
)

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
			aside = r.serve(&d, aside)
		case <-ds.quit:
			return
		}
	}
}

// serve decodes blocks of r on a decoder worker until none is left. A
// panic (a bug) stops the run with a crash.Error instead of killing the
// process, and the worker goes on serving other runs.
func (r *decodeRun) serve(d *blockDecoder, aside []byte) (out []byte) {
	defer r.wg.Done()
	defer func() {
		if p := recover(); p != nil {
			r.fail(crash.New("the trunk's block decoder", p))
			out = nil
		}
	}()
	return r.decodeSome(d, aside)
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

// await waits until block b may decode (ok) or the run stopped (!ok).
// The lock is released by a defer, so that a panic leaves it free for
// fail.
func (r *decodeRun) await(b int) (ok, own bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for !r.stopped() {
		if ok, own = r.ready(b); ok {
			return ok, own
		}
		r.cond.Wait()
	}
	return false, false
}

// finished records block b as decoded (bad: it failed its checksum) and
// wakes the blocks waiting for it.
func (r *decodeRun) finished(b int, bad bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if bad && r.failed == 0 {
		r.failed = b + 1
	}
	r.done[b] = true
	for nb := r.cp.blocks(); r.doneUpTo < nb && r.done[r.doneUpTo]; {
		r.doneUpTo++
	}
	r.cond.Broadcast()
}

// fail stops the run with err (a decoder's or a reader's panic): the other
// workers and readers see it stopped and leave.
func (r *decodeRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readErr == nil {
		r.readErr = err
	}
	r.cond.Broadcast()
}

func (r *decodeRun) decodeSome(d *blockDecoder, aside []byte) []byte {
	nb := r.cp.blocks()
	for {
		b := int(r.next.Add(1) - 1)
		if b >= nb {
			return aside
		}
		ok, own := r.await(b)
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
		r.finished(b, bad)
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

// readSafely is readPieces with a panic turned into the run's error.
func (r *decodeRun) readSafely(ctx context.Context, read ReadFunc) {
	defer func() {
		if p := recover(); p != nil {
			r.fail(crash.New("the trunk's reader", p))
		}
	}()
	r.readPieces(ctx, read)
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
			r.readSafely(ctx, read)
		}()
	}
	r.readSafely(ctx, read)
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
	read ReadFunc
	dec  *decoders // nil when no part is compressed
}

func newPartLoader(lay *Layout, read ReadFunc) *partLoader {
	l := &partLoader{read: read}
	if lay.compressed() {
		l.dec = newDecoders(0)
	}
	return l
}

// load reads part pp into buf (pp.room() bytes); run is needed for a
// compressed part. It returns the bytes read from disk. onRead, if not
// nil, may be called when the reads are done and only decoding is left.
func (l *partLoader) load(ctx context.Context, pp *part, buf []byte, run *decodeRun, onRead func()) (int64, error) {
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
		return 0, fmt.Errorf("trunk: a compressed part has %d extents, want 1", len(pp.extents))
	}
	failed, err := l.dec.run(ctx, run, l.read, buf, pp.Bytes, cp, pp.extents[0], onRead)
	if err != nil {
		return 0, err
	}
	if failed >= 0 {
		return cp.stored, fmt.Errorf("%w: packed trunk layer %d %s: block %d of %d does not decode to its checksum (the file is corrupt; pack it again)",
			errBadPack, pp.Layer, pp.Part, failed, cp.blocks())
	}
	return cp.stored, nil
}

func (l *partLoader) close() {
	if l.dec != nil {
		l.dec.close()
	}
}
