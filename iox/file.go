package iox

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// FileOptions configures [OpenFile]. The zero value opens a buffered file.
type FileOptions struct {
	// Direct asks for a second descriptor that bypasses the page cache,
	// used by a [Reader] for requests whose Dst is [Align]-aligned, so
	// checkpoint reads do not fill the page cache (which would otherwise
	// count against the RAM budget and evict useful pages). On Linux it is
	// opened with O_DIRECT; on macOS it is a plain descriptor with F_NOCACHE
	// set and read-ahead off (F_RDAHEAD 0). Elsewhere (Windows, the BSDs)
	// reads are buffered. Where the file system refuses, at open or on the
	// first read (EINVAL), the file falls back to buffered reads:
	// [File.Mode] and [File.DirectFallback] say so.
	Direct bool
	// Random advises the kernel that buffered reads are random
	// (POSIX_FADV_RANDOM), turning readahead off. Linux only; ignored
	// elsewhere.
	Random bool

	// Fault injection for iox's own tests (export_test.go sets them): a
	// refusal of the O_DIRECT open, and the raw pread of O_DIRECT reads.
	// Options, not package variables, so that tests can run in parallel.
	directErr  error
	pread      func(fd int, p []byte, off int64) (int, error)
	directOpen func(path string, buffered *os.File) (fd int, reason string, err error)
}

// Mode is how a [File] is being read.
type Mode uint8

const (
	// ModeBuffered reads through the page cache.
	ModeBuffered Mode = iota
	// ModeDirect reads bypassing the page cache: O_DIRECT on Linux,
	// F_NOCACHE on macOS. Both count as direct reads in [Stats].
	ModeDirect
)

func (m Mode) String() string {
	if m == ModeDirect {
		return "direct"
	}
	return "buffered"
}

// File is a checkpoint file open for reading. It implements [Source]; its
// ReadAt is a buffered pread (it retries EINTR and short reads). A [Reader]
// reads a File with O_DIRECT when it was opened with [FileOptions.Direct] and
// the file system allows it.
//
// File is safe for concurrent use. Close waits for reads in progress on the
// file's descriptors (so a descriptor is never closed under a pread and
// reused); close the [Reader]s using a File, or wait for their futures'
// Released, before closing it.
type File struct {
	name    string
	f       *os.File // buffered descriptor
	size    int64    // at open
	modTime time.Time

	mu     sync.RWMutex // read-held during every read; Close takes it exclusively
	closed bool

	dfd    int         // O_DIRECT descriptor, -1 if none; closed only by Close
	direct atomic.Bool // dfd in use

	reasonMu sync.Mutex
	reason   string // why the file is not (or no longer) direct

	// pread reads from a raw descriptor: sysPread, or FileOptions.pread.
	pread func(fd int, p []byte, off int64) (int, error)
}

// OpenFile opens the regular file at path for reading and records its size
// and modification time. With opts.Direct it also opens an O_DIRECT
// descriptor; failing that, the file is read buffered and
// [File.DirectFallback] says why. OpenFile fails only if the file cannot be
// opened at all, is not a regular file, or was replaced between the two
// opens.
func OpenFile(path string, opts FileOptions) (*File, error) {
	of, fi, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	f := &File{
		name:    path,
		f:       of,
		size:    fi.Size(),
		modTime: fi.ModTime(),
		dfd:     -1,
		pread:   sysPread,
	}
	if opts.pread != nil {
		f.pread = opts.pread
	}
	if opts.Random {
		adviseRandom(of)
	}
	if opts.Direct {
		var (
			fd     = -1
			reason string
		)
		if opts.directErr != nil {
			reason = "open O_DIRECT: " + opts.directErr.Error()
		} else {
			open := openDirect
			if opts.directOpen != nil {
				open = opts.directOpen
			}
			fd, reason, err = open(path, of)
			if err != nil {
				of.Close()
				return nil, err
			}
		}
		if fd >= 0 {
			f.dfd = fd
			f.direct.Store(true)
		} else {
			f.reason = reason
		}
	}
	return f, nil
}

// Name returns the path the file was opened with.
func (f *File) Name() string { return f.name }

// Size returns the size recorded at open. A later truncation does not change
// it; [File.CheckSize] detects one.
func (f *File) Size() int64 { return f.size }

// Mode reports whether reads of aligned destinations currently bypass the
// page cache (O_DIRECT, or F_NOCACHE on macOS).
func (f *File) Mode() Mode {
	if f.direct.Load() {
		return ModeDirect
	}
	return ModeBuffered
}

// DirectFallback says why the file is read buffered although O_DIRECT was
// requested (for example "open O_DIRECT: invalid argument", or "first
// O_DIRECT read: invalid argument"); it is empty when the file is direct or
// O_DIRECT was not requested.
func (f *File) DirectFallback() string {
	f.reasonMu.Lock()
	defer f.reasonMu.Unlock()
	return f.reason
}

// disableDirect switches the file to buffered reads. It reports whether this
// call made the switch (so the caller counts one fallback).
func (f *File) disableDirect(reason string) bool {
	if !f.direct.CompareAndSwap(true, false) {
		return false
	}
	f.reasonMu.Lock()
	f.reason = reason
	f.reasonMu.Unlock()
	return true
}

// ReadAt reads len(p) bytes at off through the buffered descriptor. It
// implements [io.ReaderAt].
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if !f.acquire() {
		return 0, ErrClosed
	}
	defer f.mu.RUnlock()
	return f.f.ReadAt(p, off)
}

// acquire read-locks the file for a read; false if it is closed.
func (f *File) acquire() bool {
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return false
	}
	return true
}

// CheckSize stats the open file again and returns an error wrapping
// [ErrFileChanged] if its size or modification time differ from those
// recorded at open: the file was truncated, extended or rewritten in place,
// and offsets computed from its header can no longer be trusted. A file
// replaced by rename or deleted is not reported: the open descriptor still
// reads the original, unchanged data.
func (f *File) CheckSize() error {
	if !f.acquire() {
		return ErrClosed
	}
	fi, err := f.f.Stat()
	f.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("iox: %s: %w", f.name, err)
	}
	if fi.Size() != f.size {
		return fmt.Errorf("iox: %s: size %d bytes at open, now %d: %w", f.name, f.size, fi.Size(), ErrFileChanged)
	}
	if !fi.ModTime().Equal(f.modTime) {
		return fmt.Errorf("iox: %s: modified at %v since open (was %v): %w",
			f.name, fi.ModTime().Format(time.RFC3339Nano), f.modTime.Format(time.RFC3339Nano), ErrFileChanged)
	}
	return nil
}

// Unchanged is CheckSize without allocation where the system allows it
// (fstat into a stack buffer): cheap enough to run before every forward
// pass. It returns nil if the file's size and modification time are those
// recorded at open, else CheckSize's error.
func (f *File) Unchanged() error {
	if !f.acquire() {
		return ErrClosed
	}
	changed, ok := f.changed()
	f.mu.RUnlock()
	if ok && !changed {
		return nil
	}
	return f.CheckSize()
}

// DropCache asks the kernel to evict the file's pages from the page cache
// (POSIX_FADV_DONTNEED), for example after buffered reads that should not
// count against a RAM budget. Linux only; a no-op elsewhere.
func (f *File) DropCache() error {
	if !f.acquire() {
		return ErrClosed
	}
	defer f.mu.RUnlock()
	return dropCache(f.f, 0, 0)
}

// Close closes both descriptors, after waiting for reads in progress.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.direct.Store(false)
	var err error
	if f.dfd >= 0 {
		err = closeFD(f.dfd)
		f.dfd = -1
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	return err
}
