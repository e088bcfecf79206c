package prefix

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Buffer is memory for one RAM-tier entry, from Options.Alloc.
// *iox.Buffer satisfies it, so the engine can give the RAM tier off-heap
// buffers that count in its budget.
type Buffer interface {
	// Bytes returns the memory: at least the requested length.
	Bytes() []byte
	// Free releases the memory; Bytes is not used afterwards.
	Free() error
}

// Options configures a Store. RAMBytes 0 disables the RAM tier; Dir ""
// or DiskBytes 0 disables the disk tier.
type Options struct {
	// Fingerprint names the model and payload layout (see NewHasher).
	Fingerprint string
	// BlockSize is B, the tokens per block.
	BlockSize int
	// RAMBytes bounds the payload bytes the RAM tier holds (counted as
	// the lengths requested from Alloc).
	RAMBytes int64
	// Alloc returns a buffer of n bytes for a RAM-tier entry; nil uses the
	// Go heap.
	Alloc func(n int) (Buffer, error)
	// Dir is the cache directory (see DefaultDir). Entries live in a
	// subdirectory per fingerprint and block size.
	Dir string
	// DiskBytes bounds the bytes of entry files in that subdirectory.
	DiskBytes int64
	// Logger receives warnings (a directory that is not writable, write
	// errors) and debug events; nil discards them.
	Logger *slog.Logger
}

// DefaultDir returns the default cache directory,
// os.UserCacheDir()/k3/prefix.
func DefaultDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("prefix: default directory: %w", err)
	}
	return filepath.Join(d, "k3", "prefix"), nil
}

// Tier names where an entry was found.
type Tier uint8

const (
	// TierRAM is the in-memory tier.
	TierRAM Tier = 1
	// TierDisk is the directory tier.
	TierDisk Tier = 2
)

func (t Tier) String() string {
	switch t {
	case TierRAM:
		return "ram"
	case TierDisk:
		return "disk"
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// Stats are the store's counters since Open, for metrics.
type Stats struct {
	Lookups, LookupHits int64 // Lookup calls, and those that found a point (misses = Lookups − LookupHits)
	RAMHits, DiskHits   int64 // Get calls served by each tier
	GetMisses           int64 // Get calls that found nothing, or a bad entry
	Promotions          int64 // disk hits copied into the RAM tier as they were read
	// RAMBytes counts payload bytes held or reserved by writes in progress;
	// DiskBytes counts entry file bytes (header included).
	RAMBytes, DiskBytes       int64
	RAMCapacity, DiskCapacity int64
	RAMEntries, DiskEntries   int           // entries with a copy in each tier
	RAMEvictions              int64         // RAM copies evicted to make room
	DiskEvictions             int64         // disk copies evicted to make room
	BadEntries                int64         // entries that failed validation and were removed
	StaleTemps                int64         // temporary files of killed writers removed
	BytesWritten              int64         // bytes written into entry files
	BytesRead                 int64         // payload bytes read from entry files
	WriteErrors               int64         // disk writes that failed (the entry stayed RAM-only or was dropped)
	RestoreReadTime           time.Duration // time spent inside Reader.Read, both tiers
	PendingWrites             int           // RAM entries waiting for the write-behind
	DiskEnabled               bool          // false without a disk tier, or after it was disabled
}

// tier is one tier's accounting and GreedyDual-Size clock.
type tier struct {
	cap, used int64
	l         float64 // the GDS inflation value: the priority of the last victim
	entries   int
	evictions int64
}

// prio is the GreedyDual-Size priority of an entry of size bytes that
// saves saves bytes of reads: the clock plus the value per byte held.
func (t *tier) prio(saves, size int64) float64 {
	return t.l + float64(saves)/float64(max(size, 1))
}

type entry struct {
	key    Key
	meta   Meta
	ram    *ramCopy
	disk   *diskCopy
	queued bool // waiting for, or in, the write-behind worker (pins ram)
}

type ramCopy struct {
	buf  Buffer
	data []byte
	crc  uint32
	pins int // open Readers and the write-behind worker
	prio float64
	seq  uint64
	gone bool // dropped from the entry; freed when pins reaches 0
}

type diskCopy struct {
	size int64
	prio float64
	seq  uint64
	gen  uint64 // install generation, so a directory scan that started earlier does not drop it
}

// Store is a two-tier prefix cache: a RAM tier bounded by Options.RAMBytes
// and a disk tier bounded by Options.DiskBytes. It is safe for concurrent
// use.
type Store struct {
	x      *Hasher
	log    *slog.Logger
	alloc  func(n int) (Buffer, error)
	fpID   Key
	dir    string // the entry subdirectory; "" without a disk tier
	stopWG sync.WaitGroup

	mu         sync.Mutex
	cond       *sync.Cond // queue, persisting, closed changes
	closed     bool
	diskOff    bool // no disk tier, or disabled after an error
	entries    map[Key]*entry
	anchors    map[Key][]StateRef
	inflight   map[Key]bool
	ram, disk  tier
	queue      []pending
	persisting int
	seq, gen   uint64
	dirMtime   time.Time
	refreshing bool
	st         Stats

	testHook func(stage string, n int64) error // fault injection (tests only)
}

// Open opens a store. A cache directory that cannot be created or
// written is not an error: the store logs one warning and runs without
// its disk tier.
func Open(opts Options) (*Store, error) {
	x, err := NewHasher(opts.Fingerprint, opts.BlockSize)
	if err != nil {
		return nil, err
	}
	if opts.RAMBytes < 0 || opts.DiskBytes < 0 {
		return nil, fmt.Errorf("prefix: negative capacity (RAM %d, disk %d): %w", opts.RAMBytes, opts.DiskBytes, ErrBadOptions)
	}
	s := &Store{
		x:        x,
		log:      opts.Logger,
		alloc:    opts.Alloc,
		fpID:     fingerprintID(opts.Fingerprint),
		entries:  map[Key]*entry{},
		anchors:  map[Key][]StateRef{},
		inflight: map[Key]bool{},
		ram:      tier{cap: opts.RAMBytes},
		disk:     tier{cap: opts.DiskBytes},
		diskOff:  true,
	}
	s.cond = sync.NewCond(&s.mu)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.alloc == nil {
		s.alloc = heapAlloc
	}
	if opts.Dir != "" && opts.DiskBytes > 0 {
		dir := filepath.Join(opts.Dir, fmt.Sprintf("%s-b%d", s.fpID.String()[:32], x.b))
		if err := prepareDir(dir); err != nil {
			s.log.Warn("prefix cache: directory not writable; running without the disk tier",
				slog.String("dir", dir), slog.Any("err", err))
		} else {
			s.dir, s.diskOff = dir, false
			s.refresh()
			s.stopWG.Add(1)
			go s.persistLoop()
		}
	}
	return s, nil
}

type heapBuffer struct{ b []byte }

func (h *heapBuffer) Bytes() []byte { return h.b }
func (h *heapBuffer) Free() error   { h.b = nil; return nil }

func heapAlloc(n int) (Buffer, error) { return &heapBuffer{make([]byte, n)}, nil }

// Hasher returns the store's hasher.
func (s *Store) Hasher() *Hasher { return s.x }

// Prompt hashes tokens with the store's hasher.
func (s *Store) Prompt(tokens []int) *Prompt { return s.x.Prompt(tokens) }

// Dir returns the entry subdirectory, or "" when the store has no disk
// tier.
func (s *Store) Dir() string { return s.dir }

// Lookup finds the longest restorable point of p (see the function
// Lookup), over the entries of both tiers. When another process has
// changed the cache directory since the last look, its new entries are
// indexed first.
func (s *Store) Lookup(p *Prompt, limit int) Match {
	if p.x.seed != s.x.seed {
		return Match{} // another model or block size: nothing here is for it
	}
	s.maybeRefresh()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := Lookup(lockedIndex{s}, p, limit)
	s.st.Lookups++
	if m.Hit() {
		s.st.LookupHits++
	}
	return m
}

// lockedIndex is the store's Index for callers that hold s.mu.
type lockedIndex struct{ s *Store }

func (ix lockedIndex) HasBlock(k Key) bool {
	e := ix.s.entries[k]
	return e != nil && e.meta.Kind == KindBlock
}

func (ix lockedIndex) States(anchor Key) []StateRef { return ix.s.anchors[anchor] }

// HasBlock reports whether a block entry with key k is present in a tier
// (part of Index).
func (s *Store) HasBlock(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lockedIndex{s}.HasBlock(k)
}

// States returns the state entries anchored at anchor (part of Index).
func (s *Store) States(anchor Key) []StateRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.anchors[anchor])
}

// Has reports whether an entry with key k is present in a tier.
func (s *Store) Has(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[k] != nil
}

// Stat returns an entry's metadata without reading it.
func (s *Store) Stat(k Key) (Meta, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[k]
	if e == nil {
		return Meta{}, false
	}
	m := e.meta
	m.Sections = slices.Clone(m.Sections)
	return m, true
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.RAMBytes, st.DiskBytes = s.ram.used, s.disk.used
	st.RAMEntries, st.DiskEntries = s.ram.entries, s.disk.entries
	st.RAMEvictions, st.DiskEvictions = s.ram.evictions, s.disk.evictions
	st.DiskEnabled = !s.diskOff
	st.PendingWrites = len(s.queue) + s.persisting
	st.RAMCapacity, st.DiskCapacity = s.ram.cap, s.disk.cap
	return st
}

// Put stores an entry under key unless one is present or being written:
// then it returns false at once, without calling write. Otherwise write is
// called once, with a Writer that takes exactly meta.Size bytes (more is an
// error, fewer fails the Put); it streams them into a RAM buffer or into a
// temporary file, computing the checksum on the way.
//
// An entry that fits the RAM tier (after evicting what is worth less) goes
// there, and is written to disk later by a background writer (write-behind,
// see Flush). Otherwise it is written to disk now. Put returns true if the
// entry was stored; false with a nil error when no tier can hold it; an
// error when write failed or the disk write failed (the store goes on).
func (s *Store) Put(key Key, meta Meta, write func(w io.Writer) error) (bool, error) {
	if err := meta.check(s.x.b); err != nil {
		return false, fmt.Errorf("prefix: Put %s: %w: %w", key, ErrBadMeta, err)
	}
	meta.Sections = slices.Clone(meta.Sections)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, ErrClosed
	}
	if s.entries[key] != nil || s.inflight[key] {
		s.mu.Unlock()
		return false, nil
	}
	s.inflight[key] = true
	toRAM := s.ram.cap > 0 && meta.Size <= s.ram.cap && s.evictRAM(meta.Size)
	if toRAM {
		s.ram.used += meta.Size // reserved until installed or released
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.inflight, key)
		s.mu.Unlock()
	}()

	if toRAM {
		stored, err := s.putRAM(key, meta, write)
		if stored || err != nil {
			return stored, err
		}
	}
	if s.dir == "" {
		return false, nil
	}
	if _, err := s.writeFile(key, meta, write); err != nil {
		if errors.Is(err, errNoRoom) {
			return false, nil
		}
		return false, fmt.Errorf("prefix: Put %s: %w", key, err)
	}
	return true, nil
}

// putRAM fills a RAM buffer from write. The RAM reservation is held on
// entry; it is either turned into the entry's copy or released. It returns
// false, nil when the buffer could not be allocated (the caller tries the
// disk).
func (s *Store) putRAM(key Key, meta Meta, write func(w io.Writer) error) (bool, error) {
	buf, err := s.alloc(int(meta.Size))
	if err == nil && int64(len(buf.Bytes())) < meta.Size {
		buf.Free()
		err = fmt.Errorf("allocator returned %d bytes, asked %d", len(buf.Bytes()), meta.Size)
	}
	if err != nil {
		s.log.Debug("prefix cache: RAM allocation failed", slog.Int64("bytes", meta.Size), slog.Any("err", err))
		s.mu.Lock()
		s.ram.used -= meta.Size
		s.mu.Unlock()
		return false, nil
	}
	w := &memWriter{data: buf.Bytes()[:meta.Size]}
	err = write(w)
	if err == nil && w.n != meta.Size {
		err = fmt.Errorf("payload of %d bytes, meta.Size is %d", w.n, meta.Size)
	}
	if err == nil {
		err = w.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.closed {
		err = ErrClosed // Close has freed the tier and stopped the write-behind
	}
	if err != nil {
		s.ram.used -= meta.Size
		buf.Free()
		return false, fmt.Errorf("prefix: Put %s: %w", key, err)
	}
	e := s.entries[key]
	if e == nil {
		e = &entry{key: key, meta: meta}
		s.addEntry(e)
	} else if e.ram != nil { // cannot happen while the key is in flight; keep the index sound anyway
		s.ram.used -= meta.Size
		buf.Free()
		return false, nil
	}
	// else a directory scan found another process's file of this key
	// while we wrote: this copy joins that entry.
	s.seq++
	e.ram = &ramCopy{buf: buf, data: w.data, crc: w.crc, prio: s.ram.prio(meta.Saves, meta.Size), seq: s.seq}
	s.ram.entries++
	if !s.diskOff && e.disk == nil {
		s.enqueue(e)
	}
	return true, nil
}

// memWriter streams a payload into a RAM buffer.
type memWriter struct {
	data []byte
	n    int64
	crc  uint32
	err  error
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if int64(len(p)) > int64(len(w.data))-w.n {
		w.err = fmt.Errorf("payload longer than meta.Size (%d bytes)", len(w.data))
		return 0, w.err
	}
	copy(w.data[w.n:], p)
	w.crc = crc32Update(w.crc, p)
	w.n += int64(len(p))
	return len(p), nil
}

// addEntry indexes a new entry (s.mu held).
func (s *Store) addEntry(e *entry) {
	s.entries[e.key] = e
	if e.meta.Kind == KindState {
		s.anchors[e.meta.Anchor] = append(s.anchors[e.meta.Anchor], StateRef{Key: e.key, Tail: e.meta.Tail, HasLogits: e.meta.HasLogits})
	}
}

// dropIfEmpty unindexes an entry that no tier holds any more (s.mu held).
func (s *Store) dropIfEmpty(e *entry) {
	if e.ram != nil || e.disk != nil || s.entries[e.key] != e {
		return
	}
	delete(s.entries, e.key)
	if e.meta.Kind == KindState {
		refs := s.anchors[e.meta.Anchor]
		refs = slices.DeleteFunc(refs, func(r StateRef) bool { return r.Key == e.key })
		if len(refs) == 0 {
			delete(s.anchors, e.meta.Anchor)
		} else {
			s.anchors[e.meta.Anchor] = refs
		}
	}
}

// removeRAM drops e's RAM copy; its buffer is freed now or when its last
// reader closes (s.mu held). The bytes stay counted until freed.
func (s *Store) removeRAM(e *entry) {
	rc := e.ram
	e.ram = nil
	s.ram.entries--
	rc.gone = true
	if rc.pins == 0 {
		s.freeRAM(rc)
	}
	s.dropIfEmpty(e)
}

func (s *Store) freeRAM(rc *ramCopy) {
	s.ram.used -= int64(len(rc.data))
	rc.buf.Free()
	rc.data, rc.buf = nil, nil
}

// unpin releases one pin of rc (s.mu held).
func (s *Store) unpin(rc *ramCopy) {
	rc.pins--
	if rc.gone && rc.pins == 0 && rc.buf != nil {
		s.freeRAM(rc)
	}
}

// evictRAM makes room for need more bytes in the RAM tier by evicting the
// copies of lowest GreedyDual-Size priority. Only unpinned copies are
// evicted: none that a Reader reads or that waits for the write-behind,
// so every RAM entry reaches the disk tier before it can leave RAM. It
// reports whether the room was made (s.mu held).
func (s *Store) evictRAM(need int64) bool {
	for s.ram.used+need > s.ram.cap {
		var v *entry
		for _, e := range s.entries {
			rc := e.ram
			if rc == nil || rc.pins > 0 {
				continue
			}
			if v == nil || rc.prio < v.ram.prio || (rc.prio == v.ram.prio && rc.seq < v.ram.seq) {
				v = e
			}
		}
		if v == nil {
			return false
		}
		s.ram.l = v.ram.prio
		s.ram.evictions++
		s.removeRAM(v)
	}
	return true
}

// Remove drops the entry with key from both tiers (for an engine that
// finds an entry it cannot use, e.g. sections that do not fit its
// layout). Open Readers finish reading what they opened. It reports
// whether the entry was present.
func (s *Store) Remove(key Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil {
		return false
	}
	if e.disk != nil {
		s.removeDisk(e)
	}
	if e.ram != nil {
		if e.queued { // still waiting for the write-behind: cancel it
			s.queue = slices.DeleteFunc(s.queue, func(q pending) bool {
				if q.e == e {
					e.queued = false
					s.unpin(q.rc)
					return true
				}
				return false
			})
			s.cond.Broadcast()
		}
		s.removeRAM(e)
	}
	return true
}

// Flush waits until every entry queued for the disk has been written (or
// has failed). Entries Put after Flush started may still be pending.
func (s *Store) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 || s.persisting > 0 {
		s.cond.Wait()
	}
}

// Close writes the queued entries to disk, stops the background writer and
// frees the RAM tier. Buffers that open Readers still use are freed when
// those Readers close. Calls after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.stopWG.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.ram != nil {
			s.removeRAM(e)
		}
	}
	return nil
}
