package iox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"
	"syscall"

	"github.com/k3go/k3/internal/platform/crash"
)

const (
	// DefaultQueueDepth is the number of reads a [Reader] keeps in flight
	// when [ReaderOptions.QueueDepth] is zero.
	DefaultQueueDepth = 8
	// DefaultChunkSize is the largest single read when
	// [ReaderOptions.ChunkSize] is zero; larger requests are split.
	DefaultChunkSize = 8 << 20
	// MaxQueueDepth bounds [ReaderOptions.QueueDepth].
	MaxQueueDepth = 1024
	// MaxChunkSize bounds [ReaderOptions.ChunkSize].
	MaxChunkSize = 1 << 30
	// MaxReadCall is the most bytes a [Reader] asks of one read call
	// (pread, or a [Source]'s ReadAt): 2 GiB − 4 KiB, a multiple of
	// [Align]. Every platform needs a bound below 2 GiB: macOS and the BSDs
	// refuse a read of more than INT_MAX bytes (EINVAL), Linux silently
	// shortens it to this very size, and Windows' ReadFile takes a 32-bit
	// count. A longer range (lm_head alone is 2.35 GB) is read in several
	// calls, whatever the chunk size.
	MaxReadCall = 1<<31 - Align

	// maxStalls bounds consecutive reads that make no progress (EINTR,
	// EAGAIN, zero-byte short reads) before a chunk fails.
	maxStalls = 1000
)

// ReaderOptions configures [NewReader]. The zero value gives the defaults.
type ReaderOptions struct {
	// QueueDepth is the number of worker goroutines, each issuing one read
	// at a time: the number of reads in flight at the device. 0 means
	// [DefaultQueueDepth]. NVMe needs depth: one sequential stream at depth
	// 1 leaves most of its bandwidth unused.
	QueueDepth int
	// ChunkSize is the largest single read; a larger request (a 2.3 GB trunk
	// layer, a 17.5 MB expert) is split into chunks read in parallel. It is
	// rounded up to a multiple of [Align]. 0 means [DefaultChunkSize].
	ChunkSize int
	// NoCoalesce turns off merging of adjacent requests in a batch.
	NoCoalesce bool

	// maxCall replaces MaxReadCall when positive (rounded down to a
	// multiple of Align, at least Align): iox's tests check the splitting
	// of reads longer than one call without 2 GiB buffers.
	maxCall int64
}

// Request asks for the payload [Off, Off+Len) of Src, read into Dst with the
// window layout: the payload lands at Dst[pad : pad+Len] with pad = Off %
// [Align], whatever the read mode. len(Dst) must be at least
// [WindowLen](Off, Len). For O_DIRECT, Src must be a [*File] opened with
// [FileOptions.Direct] and Dst must be [Align]-aligned ([AllocAligned]);
// otherwise the read is buffered.
//
// The Reader never retains Dst after the request's future is released.
type Request struct {
	Src Source
	Off int64
	Len int
	Dst []byte
	// OnDone, if set, is called once when the request is resolved, after
	// Done is closed, on the goroutine that resolved it (a worker, the
	// context watcher, or the submitter for requests that fail validation).
	// It must not block: the engine's use is to hand the expert to compute.
	OnDone func(*Future)
}

// Reader reads [Request]s with many reads in flight: QueueDepth worker
// goroutines pull chunk jobs from one FIFO queue and pread them. It is safe
// for concurrent use. Close it to stop the workers.
type Reader struct {
	qd        int
	chunkSize int64
	maxCall   int64 // most bytes per read call: MaxReadCall
	coalesce  bool

	mu     sync.Mutex
	cond   sync.Cond
	queue  []*chunk
	head   int
	closed bool
	wg     sync.WaitGroup

	st readerStats
}

// extent is a run of file bytes read into one contiguous destination: a
// request's window, or several requests' windows coalesced.
type extent struct {
	src        Source
	file       *File // src as a *File, or nil
	start, end int64 // union of windows, Align-aligned
	plo, phi   int64 // union of payloads
	buf        []byte
}

// chunk is one job: [cs, ce) of an extent, serving futs.
type chunk struct {
	ext    *extent
	cs, ce int64
	futs   []*Future
}

// NewReader starts a Reader's workers.
func NewReader(opts ReaderOptions) (*Reader, error) {
	qd := cmp.Or(opts.QueueDepth, DefaultQueueDepth)
	cs := cmp.Or(opts.ChunkSize, DefaultChunkSize)
	if qd < 1 || qd > MaxQueueDepth {
		return nil, fmt.Errorf("iox: ReaderOptions.QueueDepth %d outside [1, %d]", opts.QueueDepth, MaxQueueDepth)
	}
	if cs < 1 || cs > MaxChunkSize {
		return nil, fmt.Errorf("iox: ReaderOptions.ChunkSize %d outside [1, %d]", opts.ChunkSize, MaxChunkSize)
	}
	r := &Reader{qd: qd, chunkSize: AlignUp(int64(cs)), maxCall: MaxReadCall, coalesce: !opts.NoCoalesce}
	if opts.maxCall > 0 {
		r.maxCall = max(AlignDown(opts.maxCall), Align)
	}
	r.cond.L = &r.mu
	for range qd {
		r.wg.Go(r.worker)
	}
	return r, nil
}

// QueueDepth returns the number of workers.
func (r *Reader) QueueDepth() int { return r.qd }

// ChunkSize returns the chunk size in effect.
func (r *Reader) ChunkSize() int { return int(r.chunkSize) }

// Stats returns a snapshot of the counters.
func (r *Reader) Stats() Stats { return r.st.snapshot() }

// Submit queues one request. See [Reader.SubmitBatch].
func (r *Reader) Submit(ctx context.Context, req Request) *Future {
	return r.SubmitBatch(ctx, []Request{req})[0]
}

// SubmitBatch queues requests and returns their futures in the same order.
// It does not block on I/O.
//
// The batch is sorted by (source name, offset) and, unless
// [ReaderOptions.NoCoalesce], a request whose window touches or overlaps
// the previous one's on the same source is merged into one read when its
// Dst lies exactly where the previous Dst's file image continues (same
// backing array, memory offset = file offset difference): for example
// tensors of one run read into sub-slices of one arena. Extents larger than
// the chunk size are split into chunks read in parallel.
//
// A request whose ctx is cancelled is resolved with ctx.Err() at once; chunks
// not yet started are dropped, chunks in flight finish into Dst before
// [Future.Released] closes. Invalid requests (see [Request]) are resolved at
// once with a [*ReadError] wrapping [ErrBadRequest] or [ErrOutOfRange]; a
// closed Reader resolves them with [ErrClosed].
func (r *Reader) SubmitBatch(ctx context.Context, reqs []Request) []*Future {
	r.st.requests.Add(int64(len(reqs)))
	futs := make([]*Future, len(reqs))
	live := make([]*Future, 0, len(reqs))
	var bytes int64
	for i, q := range reqs {
		f := newFuture(r, q)
		futs[i] = f
		if err := checkRequest(q); err != nil {
			f.finish(err)
			continue
		}
		bytes += int64(q.Len)
		if q.Len == 0 {
			f.finish(nil)
			continue
		}
		live = append(live, f)
	}
	r.st.bytesRequested.Add(bytes)
	if len(live) == 0 {
		return futs
	}
	if err := ctx.Err(); err != nil {
		for _, f := range live {
			f.finish(err)
		}
		return futs
	}
	chunks := r.plan(live)

	b := &batch{}
	b.remaining.Store(int64(len(live)) + 1)
	for _, f := range live {
		f.batch = b
	}
	b.stop = context.AfterFunc(ctx, func() {
		err := ctx.Err()
		for _, f := range live {
			f.resolve(err)
		}
		r.purge()
	})
	b.resolvedOne() // the submitter's token: stop is set

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		for _, c := range chunks {
			r.discard(c)
		}
		return futs
	}
	r.queue = append(r.queue, chunks...)
	r.mu.Unlock()
	if len(chunks) == 1 {
		r.cond.Signal()
	} else {
		r.cond.Broadcast()
	}
	return futs
}

// Close stops accepting requests, resolves queued ones with [ErrClosed],
// and waits for the reads in flight to finish (a pread cannot be
// interrupted; if the device hangs, so does Close). After Close returns,
// no worker goroutine remains and every future is released.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	q := slices.Clone(r.queue[r.head:])
	r.queue, r.head = nil, 0
	r.mu.Unlock()
	r.cond.Broadcast()
	for _, c := range q {
		r.discard(c)
	}
	r.wg.Wait()
	return nil
}

func (r *Reader) worker() {
	for {
		r.mu.Lock()
		for r.head == len(r.queue) && !r.closed {
			r.cond.Wait()
		}
		if r.head == len(r.queue) {
			r.mu.Unlock()
			return
		}
		c := r.queue[r.head]
		r.queue[r.head] = nil
		r.head++
		if r.head == len(r.queue) {
			r.queue, r.head = r.queue[:0], 0
		}
		r.mu.Unlock()
		r.run(c)
	}
}

// purge drops queued chunks whose requests are all resolved (cancelled or
// failed), so their futures are released without waiting for a worker.
func (r *Reader) purge() {
	var dropped []*chunk
	r.mu.Lock()
	q := r.queue[r.head:]
	kept := q[:0]
	for _, c := range q {
		if c.settled() {
			dropped = append(dropped, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(q[len(kept):])
	r.queue = r.queue[:r.head+len(kept)]
	r.mu.Unlock()
	for _, c := range dropped {
		r.st.skipped.Add(1)
		for _, f := range c.futs {
			f.chunkDone(nil)
		}
	}
}

// settled reports whether every request c serves is resolved.
func (c *chunk) settled() bool {
	for _, f := range c.futs {
		if !f.resolved.Load() {
			return false
		}
	}
	return true
}

func (r *Reader) discard(c *chunk) {
	r.st.skipped.Add(1)
	for _, f := range c.futs {
		f.chunkDone(ErrClosed)
	}
}

func checkRequest(q Request) error {
	bad := func(format string, args ...any) error {
		name := ""
		if q.Src != nil {
			name = q.Src.Name()
		}
		return &ReadError{File: name, Off: q.Off, Len: q.Len, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case q.Src == nil:
		return bad("%w: nil Src", ErrBadRequest)
	case q.Off < 0 || q.Len < 0:
		return bad("%w: negative offset or length", ErrBadRequest)
	case q.Off > q.Src.Size()-int64(q.Len):
		return bad("%w: source size is %d", ErrOutOfRange, q.Src.Size())
	case q.Len > 0 && len(q.Dst) < WindowLen(q.Off, q.Len):
		return bad("%w: len(Dst) %d < window length %d", ErrBadRequest, len(q.Dst), WindowLen(q.Off, q.Len))
	}
	return nil
}

// plan sorts the futures, coalesces them into extents and cuts the extents
// into chunks, setting each future's pending count.
func (r *Reader) plan(futs []*Future) []*chunk {
	order := slices.Clone(futs)
	slices.SortStableFunc(order, func(a, b *Future) int {
		if c := cmp.Compare(a.req.Src.Name(), b.req.Src.Name()); c != 0 {
			return c
		}
		return cmp.Compare(a.req.Off, b.req.Off)
	})
	var (
		exts    []*extent
		members [][]*Future
	)
	for _, f := range order {
		if n := len(exts); n > 0 && r.coalesce {
			if e := exts[n-1]; canCoalesce(e, f) {
				e.end = max(e.end, f.we)
				e.plo, e.phi = min(e.plo, f.plo), max(e.phi, f.phi)
				e.buf = e.buf[:e.end-e.start]
				members[n-1] = append(members[n-1], f)
				r.st.coalesced.Add(1)
				continue
			}
		}
		file, _ := f.req.Src.(*File)
		exts = append(exts, &extent{
			src: f.req.Src, file: file,
			start: f.ws, end: f.we, plo: f.plo, phi: f.phi,
			buf: f.req.Dst[:f.we-f.ws],
		})
		members = append(members, []*Future{f})
	}

	C := r.chunkSize
	var chunks []*chunk
	for i, e := range exts {
		n := (e.end - e.start + C - 1) / C
		cs := make([]chunk, n)
		for k := range cs {
			cs[k] = chunk{ext: e, cs: e.start + int64(k)*C, ce: min(e.start+int64(k+1)*C, e.end)}
		}
		for _, f := range members[i] {
			k0, k1 := (f.ws-e.start)/C, (f.we-1-e.start)/C
			f.pending.Store(int32(k1 - k0 + 1))
			for k := k0; k <= k1; k++ {
				cs[k].futs = append(cs[k].futs, f)
			}
		}
		for k := range cs {
			if len(cs[k].futs) > 0 { // always, as windows tile the extent
				chunks = append(chunks, &cs[k])
			}
		}
	}
	return chunks
}

// canCoalesce reports whether f's window can be read as part of e: same
// source, windows touching or overlapping, and f's Dst exactly where e's
// file image continues in memory.
func canCoalesce(e *extent, f *Future) bool {
	if f.ws > e.end || f.ws < e.start || !sameSource(e.src, f.req.Src) {
		return false
	}
	delta := f.ws - e.start
	if int64(cap(e.buf)) < delta+(f.we-f.ws) {
		return false
	}
	return &e.buf[:cap(e.buf)][delta] == &f.req.Dst[0]
}

// sameSource compares sources without panicking on non-comparable types.
func sameSource(a, b Source) bool {
	if fa, ok := a.(*File); ok {
		fb, ok := b.(*File)
		return ok && fa == fb
	}
	va := reflect.ValueOf(a)
	if va.Type() != reflect.TypeOf(b) || !va.Comparable() {
		return false
	}
	return a == b
}

// run executes one chunk job and settles its share of each future.
func (r *Reader) run(c *chunk) {
	if c.settled() {
		r.st.skipped.Add(1)
		for _, f := range c.futs {
			f.chunkDone(nil)
		}
		return
	}
	r.st.chunks.Add(1)
	t0 := r.st.begin()
	hi, err := r.readCaught(c)
	r.st.end(t0)
	failed := false
	for _, f := range c.futs {
		need := min(c.ce, f.phi)
		if need <= max(c.cs, f.plo) || hi >= need {
			f.chunkDone(nil)
			continue
		}
		f.chunkDone(r.readError(c, f, hi, err))
		failed = true
	}
	if failed {
		r.purge() // the failed requests' other chunks need not be read
	}
}

// readCaught is read with a panic (a bug, or a Source that panics) turned
// into the chunk's error, so that the requests fail instead of the process.
func (r *Reader) readCaught(c *chunk) (hi int64, err error) {
	hi = c.cs
	defer crash.Catch("the I/O reader", &err)
	return r.read(c)
}

func (r *Reader) readError(c *chunk, f *Future, hi int64, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("source ended at offset %d (size %d): %w", hi, c.ext.src.Size(), io.ErrUnexpectedEOF)
		if c.ext.file != nil {
			if cerr := c.ext.file.CheckSize(); cerr != nil {
				err = fmt.Errorf("%w; %w", err, cerr)
			}
		}
	}
	return &ReadError{File: c.ext.src.Name(), Off: f.req.Off, Len: f.req.Len, Err: err}
}

var errDirectRefused = errors.New("O_DIRECT read refused")

// read reads chunk c. It returns hi, the end of the contiguous range read
// (from c.cs for direct reads, from the first payload byte in c for
// buffered ones), and the error that stopped it early, if any.
func (r *Reader) read(c *chunk) (int64, error) {
	e := c.ext
	f := e.file
	if f == nil {
		return r.readBuffered(e.src, c)
	}
	if !f.acquire() {
		return c.cs, ErrClosed
	}
	defer f.mu.RUnlock()
	if f.direct.Load() {
		if IsAligned(e.buf) {
			hi, err := r.readDirect(f, c)
			if !errors.Is(err, errDirectRefused) {
				return hi, err
			}
			if f.disableDirect("first " + err.Error()) {
				r.st.fallbacks.Add(1)
			}
		} else {
			r.st.misaligned.Add(1)
		}
	}
	return r.readBuffered(f.f, c)
}

// readDirect reads the whole chunk [cs, ce) with O_DIRECT (or F_NOCACHE)
// preads of at most maxCall bytes each. A short read happens only at the
// end of file, possibly mid-block; the loop then restarts at the block
// boundary (O_DIRECT needs aligned offsets), and a re-read that gets no
// further means the file ends there.
func (r *Reader) readDirect(f *File, c *chunk) (int64, error) {
	e := c.ext
	pos, end := c.cs, c.ce
	need := min(c.ce, e.phi)
	hi, stalls := pos, 0
	for pos < end {
		callEnd := min(end, pos+r.maxCall)
		n, err := f.pread(f.dfd, e.buf[pos-e.start:callEnd-e.start], pos)
		r.st.reads.Add(1)
		r.st.directReads.Add(1)
		if n <= 0 {
			n = 0
		} else {
			r.st.bytesRead.Add(int64(n))
			r.st.bytesDirect.Add(int64(n))
		}
		if err != nil {
			switch {
			case isRetryable(err):
				if stalls++; stalls > maxStalls {
					return hi, fmt.Errorf("pread at offset %d: gave up after %d retries: %w", pos, maxStalls, err)
				}
				r.st.retries.Add(1)
				continue
			case isDirectRefusal(err):
				return hi, fmt.Errorf("%w: %w", errDirectRefused, err)
			default:
				return hi, fmt.Errorf("pread at offset %d: %w", pos, err)
			}
		}
		if n == 0 {
			break
		}
		pos += int64(n)
		if pos <= hi {
			break // a re-read of the last partial block got no further
		}
		hi, stalls = pos, 0
		if hi >= need {
			break
		}
		if pos == callEnd {
			continue // a full call: the next one reads on
		}
		r.st.retries.Add(1)
		pos = AlignDown(pos)
	}
	if hi >= need {
		return hi, nil
	}
	return hi, io.EOF
}

// readBuffered reads the payload part of chunk c through ra, in calls of at
// most maxCall bytes, looping on short reads, EINTR and EAGAIN.
func (r *Reader) readBuffered(ra io.ReaderAt, c *chunk) (int64, error) {
	e := c.ext
	pos, end := max(c.cs, e.plo), min(c.ce, e.phi)
	stalls := 0
	for pos < end {
		callLen := min(end-pos, r.maxCall)
		n, err := ra.ReadAt(e.buf[pos-e.start:pos+callLen-e.start], pos)
		r.st.reads.Add(1)
		n = min(max(n, 0), int(callLen))
		r.st.bytesRead.Add(int64(n))
		pos += int64(n)
		if pos >= end {
			return pos, nil
		}
		if err == nil && int64(n) == callLen {
			stalls = 0
			continue // a full call: the next one reads on
		}
		if n > 0 {
			stalls = 0
		} else {
			stalls++
		}
		switch {
		case err == nil || isRetryable(err):
			if stalls > maxStalls {
				return pos, fmt.Errorf("read at offset %d: no progress after %d attempts: %w", pos, maxStalls, cmp.Or(err, io.ErrNoProgress))
			}
			r.st.retries.Add(1)
		case errors.Is(err, io.EOF):
			return pos, io.EOF
		default:
			return pos, fmt.Errorf("read at offset %d: %w", pos, err)
		}
	}
	return pos, nil
}

func isRetryable(err error) bool {
	return errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN)
}

func isDirectRefusal(err error) bool { return errors.Is(err, syscall.EINVAL) }
