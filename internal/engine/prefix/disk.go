package prefix

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/k3go/k3/iox"
)

// writeFile writes an entry file crash-safely and indexes it: a locked
// temporary file, the payload after the header region, the header (with
// both checksums) last, fsync, rename over the final name, fsync of the
// directory. A reader therefore sees either no file or a complete one. It
// returns errNoRoom when the tier cannot take the entry.
func (s *Store) writeFile(key Key, meta Meta, write func(io.Writer) error) (int64, error) {
	need := headerRegion + meta.Size
	s.mu.Lock()
	if s.diskOff || need > s.disk.cap || !s.evictDisk(need) {
		s.mu.Unlock()
		return 0, errNoRoom
	}
	s.disk.used += need // reserved; becomes the copy's bytes on success
	s.mu.Unlock()

	err := s.writeTemp(key, meta, write)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.disk.used -= need
		if isDiskError(err) {
			s.st.WriteErrors++
			s.writeFailed(err, need)
		}
		return 0, err
	}
	s.st.BytesWritten += need
	e := s.entries[key]
	if e == nil {
		e = &entry{key: key, meta: meta}
		s.addEntry(e)
	}
	if e.disk != nil { // a directory scan found our file first
		s.disk.used -= e.disk.size
		s.disk.entries--
	}
	s.seq++
	s.gen++
	e.disk = &diskCopy{size: need, prio: s.disk.prio(meta.Saves, need), seq: s.seq, gen: s.gen}
	s.disk.entries++
	return need, nil
}

// writeTemp writes and renames the file; file system errors come back
// as diskError.
func (s *Store) writeTemp(key Key, meta Meta, write func(io.Writer) error) error {
	f, tmp, err := createTemp(s.dir, key)
	if errors.Is(err, fs.ErrNotExist) { // the directory was removed under us
		if err = os.MkdirAll(s.dir, 0o755); err == nil {
			f, tmp, err = createTemp(s.dir, key)
		}
	}
	if err != nil {
		return diskError{err}
	}
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmp)
		}
		f.Close() // releases the lock, after the rename
	}()
	if _, err := f.Seek(headerRegion, io.SeekStart); err != nil {
		return diskError{err}
	}
	w := &fileWriter{f: f, limit: meta.Size, hook: s.testHook}
	if err := write(w); err != nil {
		if isDiskError(w.err) {
			return w.err // the caller passed on our error, perhaps wrapped
		}
		return err
	}
	if w.err != nil {
		return w.err
	}
	if w.n != meta.Size {
		return fmt.Errorf("payload of %d bytes, meta.Size is %d", w.n, meta.Size)
	}
	h := header{fp: s.fpID, key: key, blockSize: s.x.b, meta: meta, payloadCRC: w.crc}
	var hb [headerRegion]byte
	h.encode(hb[:])
	if err := s.hook("header", w.n); err != nil {
		return diskError{err}
	}
	if _, err := f.WriteAt(hb[:], 0); err != nil {
		return diskError{err}
	}
	if err := f.Sync(); err != nil {
		return diskError{err}
	}
	dropPageCache(f)
	if err := s.hook("rename", w.n); err != nil {
		return diskError{err}
	}
	if err := os.Rename(tmp, s.path(key)); err != nil {
		return diskError{err}
	}
	renamed = true
	if err := iox.SyncDir(s.dir); err != nil {
		// The entry is complete; without the directory sync a power loss
		// may lose it, never tear it.
		s.log.Debug("prefix cache: directory sync", slog.Any("err", err))
	}
	return nil
}

func (s *Store) hook(stage string, n int64) error {
	if s.testHook == nil {
		return nil
	}
	return s.testHook(stage, n)
}

// writeFailed reacts to a failed disk write (s.mu held): a full disk
// evicts the entry's size worth of entries so the next write fits; a
// directory that refuses writes turns the disk tier off.
func (s *Store) writeFailed(err error, need int64) {
	switch {
	case isNoSpace(err):
		s.log.Debug("prefix cache: disk full, evicting", slog.Int64("bytes", need), slog.Any("err", err))
		for freed := int64(0); freed < need; {
			v := s.diskVictim()
			if v == nil {
				break
			}
			freed += v.disk.size
			s.disk.l = v.disk.prio
			s.disk.evictions++
			s.removeDisk(v)
		}
	case isNotPermitted(err):
		s.disableDisk(err)
	default:
		s.log.Warn("prefix cache: disk write failed", slog.String("dir", s.dir), slog.Any("err", err))
	}
}

// disableDisk turns the disk tier off after an error that later writes
// would repeat (s.mu held). Files already written stay readable.
func (s *Store) disableDisk(err error) {
	if s.diskOff {
		return
	}
	s.diskOff = true
	s.log.Warn("prefix cache: directory not writable; running without the disk tier",
		slog.String("dir", s.dir), slog.Any("err", err))
	for _, q := range s.queue {
		q.e.queued = false
		s.unpin(q.rc)
	}
	s.queue = nil
	s.cond.Broadcast()
}

// diskVictim returns the disk copy of lowest GreedyDual-Size priority
// (ties: least recently used), or nil (s.mu held).
func (s *Store) diskVictim() *entry {
	var v *entry
	for _, e := range s.entries {
		d := e.disk
		if d == nil {
			continue
		}
		if v == nil || d.prio < v.disk.prio || (d.prio == v.disk.prio && d.seq < v.disk.seq) {
			v = e
		}
	}
	return v
}

// evictDisk makes room for need more bytes in the disk tier (s.mu held).
// Files open in Readers stay readable after their removal (Unix).
func (s *Store) evictDisk(need int64) bool {
	for s.disk.used+need > s.disk.cap {
		v := s.diskVictim()
		if v == nil {
			return false
		}
		s.disk.l = v.disk.prio
		s.disk.evictions++
		s.removeDisk(v)
	}
	return true
}

// removeDisk deletes e's file and drops its disk copy (s.mu held).
func (s *Store) removeDisk(e *entry) {
	if err := os.Remove(s.path(e.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Debug("prefix cache: remove", slog.String("key", e.key.String()), slog.Any("err", err))
	}
	s.forgetDisk(e)
}

// forgetDisk drops e's disk copy from the index (s.mu held).
func (s *Store) forgetDisk(e *entry) {
	s.disk.used -= e.disk.size
	s.disk.entries--
	e.disk = nil
	s.dropIfEmpty(e)
}

// pending is one RAM copy waiting for the write-behind.
type pending struct {
	e  *entry
	rc *ramCopy
}

// enqueue queues e's RAM copy for the write-behind, pinning it (s.mu
// held).
func (s *Store) enqueue(e *entry) {
	e.queued = true
	e.ram.pins++
	s.queue = append(s.queue, pending{e, e.ram})
	s.cond.Broadcast()
}

// persistLoop is the write-behind: it writes RAM entries to disk in the
// order they were Put, until the store is closed and the queue is empty.
func (s *Store) persistLoop() {
	defer s.stopWG.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			return
		}
		q := s.queue[0]
		s.queue = slices.Delete(s.queue, 0, 1)
		s.persisting++
		s.mu.Unlock()
		s.persist(q)
		s.mu.Lock()
		s.persisting--
		q.e.queued = false
		s.unpin(q.rc)
		s.cond.Broadcast()
	}
}

// persist writes one RAM copy to disk, retrying once after a full disk
// made room.
func (s *Store) persist(q pending) {
	s.mu.Lock()
	done := q.e.disk != nil // another process wrote it and a scan found it
	s.mu.Unlock()
	if done {
		return
	}
	data := q.rc.data
	write := func(w io.Writer) error {
		for off := 0; off < len(data); off += persistChunk {
			if _, err := w.Write(data[off:min(off+persistChunk, len(data))]); err != nil {
				return err
			}
		}
		return nil
	}
	for attempt := 0; attempt < 2; attempt++ {
		_, err := s.writeFile(q.e.key, q.e.meta, write)
		if err == nil || errors.Is(err, errNoRoom) || !isNoSpace(err) {
			return
		}
	}
}

// entryFile is a validated entry file found in the directory.
type entryFile struct {
	key   Key
	meta  Meta
	size  int64
	mtime time.Time
}

// checkHeader validates a parsed header against the store and the file
// it came from.
func (s *Store) checkHeader(h *header, key Key, size int64) error {
	switch {
	case h.fp != s.fpID:
		return fmt.Errorf("%w: written for another fingerprint", ErrCorrupt)
	case h.key != key:
		return fmt.Errorf("%w: header key %s in the file of %s", ErrCorrupt, h.key, key)
	case h.blockSize != s.x.b:
		return fmt.Errorf("%w: block size %d, store has %d", ErrCorrupt, h.blockSize, s.x.b)
	case size != headerRegion+h.meta.Size:
		return fmt.Errorf("%w: file is %d bytes, header declares %d", ErrCorrupt, size, headerRegion+h.meta.Size)
	}
	return nil
}

// readHeader reads and validates the header region of the entry file f
// (of size bytes) named for key.
func (s *Store) readHeader(f io.ReaderAt, size int64, key Key) (header, error) {
	var b [headerRegion]byte
	n, err := f.ReadAt(b[:min(size, headerRegion)], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return header{}, err
	}
	return s.parseRegion(b[:n], key, size)
}

// parseRegion validates the header region b of an entry file of size
// bytes named for key: the header, its agreement with the store and the
// file, and the zero padding (so that every byte of a file is checked: the
// header by its checksum, the padding here, the payload by its checksum).
func (s *Store) parseRegion(b []byte, key Key, size int64) (header, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, err
	}
	if err := s.checkHeader(&h, key, size); err != nil {
		return h, err
	}
	hl := fixedHeader + 8*len(h.meta.Sections) + 4
	if len(b) < headerRegion || slices.ContainsFunc(b[hl:headerRegion], func(c byte) bool { return c != 0 }) {
		return h, fmt.Errorf("%w: header padding is not zero", ErrCorrupt)
	}
	return h, nil
}

// openEntry opens and validates the file of key. A bad file is removed
// (unless it is of a newer format) and reported as ErrCorrupt; a missing
// one as ErrNotFound.
func (s *Store) openEntry(key Key) (*os.File, header, error) {
	path := s.path(key)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, header{}, ErrNotFound
	}
	if err != nil {
		return nil, header{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, header{}, err
	}
	h, err := s.readHeader(f, st.Size(), key)
	if err != nil {
		if errors.Is(err, ErrCorrupt) && !isNewerVersion(err) && samePath(f, path) {
			os.Remove(path)
			s.mu.Lock()
			s.st.BadEntries++
			s.mu.Unlock()
			s.log.Warn("prefix cache: removed a bad entry", slog.String("file", path), slog.Any("err", err))
		}
		f.Close()
		if isNewerVersion(err) {
			return nil, header{}, ErrNotFound
		}
		return nil, header{}, fmt.Errorf("prefix: %s: %w", path, err)
	}
	return f, h, nil
}

// maybeRefresh rescans the directory when its modification time changed
// (another process, or this one, added or removed entries).
func (s *Store) maybeRefresh() {
	if s.dir == "" {
		return
	}
	st, err := os.Stat(s.dir)
	if err != nil {
		return
	}
	s.mu.Lock()
	changed := !st.ModTime().Equal(s.dirMtime)
	s.mu.Unlock()
	if changed {
		s.refresh()
	}
}

// refresh lists the directory and reconciles the index with it: files it
// does not know are validated (header only) and indexed, bad ones removed;
// disk copies whose files are gone (evicted by another process) are
// dropped. Temporary files of killed writers are removed (those of live
// writers are locked).
func (s *Store) refresh() {
	s.mu.Lock()
	if s.refreshing || s.dir == "" {
		s.mu.Unlock()
		return
	}
	s.refreshing = true
	gen0 := s.gen
	known := make(map[Key]bool, s.disk.entries)
	for k, e := range s.entries {
		if e.disk != nil {
			known[k] = true
		}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.refreshing = false
		s.mu.Unlock()
	}()

	st, err := os.Stat(s.dir)
	if err != nil {
		return
	}
	des, err := os.ReadDir(s.dir)
	if err != nil {
		s.log.Debug("prefix cache: listing", slog.String("dir", s.dir), slog.Any("err", err))
		return
	}
	listed := make(map[Key]bool, len(des))
	var found []entryFile
	var stale int64
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(s.dir, name)
		if strings.HasPrefix(name, tempPrefix) {
			if cleanTemp(path) {
				stale++
			}
			continue
		}
		k, ok := keyFromName(name)
		if !ok {
			continue
		}
		listed[k] = true
		if known[k] {
			continue
		}
		f, h, err := s.openEntry(k) // removes and counts a bad file
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			continue
		}
		found = append(found, entryFile{key: k, meta: h.meta, size: fi.Size(), mtime: fi.ModTime()})
	}
	// Oldest first, so they rank as least recently used among equals.
	slices.SortFunc(found, func(a, b entryFile) int { return a.mtime.Compare(b.mtime) })

	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.StaleTemps += stale
	s.dirMtime = st.ModTime()
	for _, fe := range found {
		e := s.entries[fe.key]
		if e == nil {
			e = &entry{key: fe.key, meta: fe.meta}
			s.addEntry(e)
		}
		if e.disk != nil {
			continue
		}
		s.seq++
		s.gen++
		e.disk = &diskCopy{size: fe.size, prio: s.disk.prio(fe.meta.Saves, fe.size), seq: s.seq, gen: s.gen}
		s.disk.used += fe.size
		s.disk.entries++
	}
	for k, e := range s.entries {
		if e.disk != nil && !listed[k] && e.disk.gen <= gen0 {
			s.forgetDisk(e) // removed by another process
		}
	}
	s.evictDisk(0)
}
