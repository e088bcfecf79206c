package prefix

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"
)

var errReaderClosed = errors.New("prefix: Reader used after Close")

// Get opens the entry with key for reading: from RAM if it has a copy
// there, else from its file. The metadata is available at once
// ([Reader.Meta]); the payload streams through Read and is verified
// against its checksum when the last byte has been read.
//
// A file that fails validation (bad header, another fingerprint, an older
// format, a wrong length) is removed and reported as ErrCorrupt; a key no
// tier holds as ErrNotFound. A disk hit is copied into the RAM tier as it
// is read, when the RAM tier has room for it after evicting what is worth
// less. The Reader pins what it reads and must be closed.
func (s *Store) Get(key Key) (*Reader, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if e := s.entries[key]; e != nil && e.ram != nil {
		rc := e.ram
		rc.pins++
		s.touch(e)
		s.st.RAMHits++
		r := &Reader{s: s, key: key, meta: e.meta, tier: TierRAM, rc: rc, want: rc.crc}
		s.mu.Unlock()
		r.meta.Sections = slices.Clone(r.meta.Sections)
		return r, nil
	}
	hasDir := s.dir != ""
	s.mu.Unlock()
	if !hasDir {
		s.mu.Lock()
		s.st.GetMisses++
		s.mu.Unlock()
		return nil, ErrNotFound
	}

	f, h, err := s.openEntry(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		gone := errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt)
		if e := s.entries[key]; gone && e != nil && e.disk != nil {
			s.forgetDisk(e) // another process evicted it, or it was bad (removed)
		}
		s.st.GetMisses++
		return nil, err
	}
	if s.closed {
		f.Close()
		return nil, ErrClosed
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		s.st.GetMisses++
		return nil, fmt.Errorf("prefix: Get %s: %w", key, err)
	}
	e := s.entries[key]
	if e == nil { // written by another process since the last scan
		e = &entry{key: key, meta: h.meta}
		s.addEntry(e)
	}
	if e.disk == nil {
		s.seq++
		s.gen++
		e.disk = &diskCopy{size: st.Size(), gen: s.gen}
		s.disk.used += st.Size()
		s.disk.entries++
	}
	s.touch(e)
	s.st.DiskHits++
	r := &Reader{s: s, key: key, meta: h.meta, tier: TierDisk, f: f, want: h.payloadCRC}
	size := h.meta.Size
	if e.ram == nil && !s.inflight[key] && s.ram.cap > 0 && size <= s.ram.cap && s.evictRAM(size) {
		// Reserve now, allocate outside the lock (a large zeroed buffer
		// takes a while), give the reservation back if that fails.
		s.ram.used += size
		s.inflight[key] = true
		s.mu.Unlock()
		buf, err := s.alloc(int(size))
		if err == nil && int64(len(buf.Bytes())) < size {
			buf.Free()
			err = errors.New("short buffer")
		}
		s.mu.Lock()
		if err == nil {
			r.promo, r.promoData = buf, buf.Bytes()[:size]
		} else {
			s.ram.used -= size
			delete(s.inflight, key)
		}
	}
	return r, nil
}

// touch renews e's GreedyDual-Size priorities on a hit (s.mu held).
func (s *Store) touch(e *entry) {
	s.seq++
	if rc := e.ram; rc != nil {
		rc.prio, rc.seq = s.ram.prio(e.meta.Saves, int64(len(rc.data))), s.seq
	}
	if d := e.disk; d != nil {
		d.prio, d.seq = s.disk.prio(e.meta.Saves, d.size), s.seq
	}
}

// Reader streams one entry's payload. It is not safe for concurrent use.
type Reader struct {
	s    *Store
	key  Key
	meta Meta
	tier Tier
	rc   *ramCopy // RAM source (pinned until Close)
	f    *os.File // disk source

	off       int64
	crc, want uint32
	end       error // set at the end of the payload: io.EOF if verified, else the corruption
	took      time.Duration

	promo     Buffer // disk hit being copied into RAM
	promoData []byte

	closed bool
	result error
}

// Key returns the entry's key.
func (r *Reader) Key() Key { return r.key }

// Meta returns the entry's metadata (from RAM, or the validated header).
func (r *Reader) Meta() Meta {
	m := r.meta
	m.Sections = slices.Clone(m.Sections)
	return m
}

// Tier reports where the payload comes from.
func (r *Reader) Tier() Tier { return r.tier }

// Read reads payload bytes. When the last byte has been read, the checksum
// is checked: Read then returns io.EOF if it matches, or an error wrapping
// ErrCorrupt (with the last bytes, and on every later call) if it does
// not; the entry is then removed, and everything read from it must be
// discarded. Close reports the same outcome, which callers using
// io.ReadFull (that drops an error arriving with the last bytes) must
// check.
func (r *Reader) Read(p []byte) (int, error) {
	if r.closed {
		return 0, errReaderClosed
	}
	if r.end != nil {
		return 0, r.end
	}
	size := r.meta.Size
	if r.off == size {
		r.finish(nil)
		return 0, r.end
	}
	k := int(min(int64(len(p)), size-r.off))
	if k == 0 {
		return 0, nil
	}
	t0 := time.Now()
	var n int
	var rerr error
	if r.rc != nil {
		n = copy(p[:k], r.rc.data[r.off:])
	} else {
		n, rerr = r.f.ReadAt(p[:k], headerRegion+r.off)
	}
	r.crc = crc32Update(r.crc, p[:n])
	if r.promoData != nil {
		copy(r.promoData[r.off:], p[:n])
	}
	r.off += int64(n)
	r.took += time.Since(t0)
	if n < k {
		r.finish(fmt.Errorf("%w: %s: payload ends at %d of %d bytes: %v", ErrCorrupt, r.key, r.off, size, rerr))
		return n, r.end
	}
	if r.off == size {
		r.finish(nil)
		if r.end != io.EOF {
			return n, r.end
		}
	}
	return n, nil
}

// finish settles the outcome once the payload has been read (or found
// short): a failure removes the entry's copy that was read.
func (r *Reader) finish(short error) {
	if short == nil && r.crc == r.want {
		r.end = io.EOF
		return
	}
	r.end = short
	if r.end == nil {
		r.end = fmt.Errorf("%w: %s: payload checksum %08x, header says %08x", ErrCorrupt, r.key, r.crc, r.want)
	}
	s := r.s
	s.log.Warn("prefix cache: removed a bad entry", slog.String("key", r.key.String()), slog.String("tier", r.tier.String()), slog.Any("err", r.end))
	removeFile := r.f != nil && samePath(r.f, s.path(r.key))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.BadEntries++
	e := s.entries[r.key]
	if e != nil && r.rc != nil && e.ram == r.rc {
		s.removeRAM(e)
	}
	if removeFile {
		if e != nil && e.disk != nil {
			s.removeDisk(e)
		} else {
			os.Remove(s.path(r.key))
		}
	}
}

// Close releases the Reader and reports whether what was read can be
// trusted: nil if the whole payload was read and its checksum matched; an
// error wrapping ErrCorrupt if it did not; ErrIncomplete if the payload
// was not read to its end (nothing was verified).
func (r *Reader) Close() error {
	if r.closed {
		return r.result
	}
	r.closed = true
	switch {
	case r.end == io.EOF:
		r.result = nil
	case r.end != nil:
		r.result = r.end
	default:
		r.result = ErrIncomplete
	}
	if r.f != nil {
		dropPageCache(r.f)
		r.f.Close()
	}
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.rc != nil {
		s.unpin(r.rc)
	}
	if r.promo != nil {
		size := r.meta.Size
		e := s.entries[r.key]
		if r.result == nil && !s.closed && e != nil && e.ram == nil {
			s.seq++
			e.ram = &ramCopy{buf: r.promo, data: r.promoData, crc: r.want, prio: s.ram.prio(e.meta.Saves, size), seq: s.seq}
			s.ram.entries++
			s.st.Promotions++
		} else {
			s.ram.used -= size
			r.promo.Free()
		}
		r.promo, r.promoData = nil, nil
		delete(s.inflight, r.key)
	}
	if r.tier == TierDisk {
		s.st.BytesRead += r.off
	}
	s.st.RestoreReadTime += r.took
	return r.result
}
