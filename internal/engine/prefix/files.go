package prefix

// The disk tier's files: names, temporaries, directory sync and the
// writer that checksums what it writes.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in the entry subdirectory: <key hex>.k3pc for entries,
// .tmp-<key prefix>-<pid>-<random> for files being written.
const (
	entrySuffix = ".k3pc"
	tempPrefix  = ".tmp-"
)

// persistChunk is the write size of the write-behind: large enough to
// cost nothing per call, bounded so that tests can kill a writer mid-file.
var persistChunk = 8 << 20

// errNoRoom reports an entry the disk tier cannot take: larger than the
// bound, the bound cannot be met, or the tier is off.
var errNoRoom = errors.New("no room in the disk tier")

func crc32Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

func (s *Store) path(k Key) string { return filepath.Join(s.dir, k.String()+entrySuffix) }

func keyFromName(name string) (Key, bool) {
	hexKey, ok := strings.CutSuffix(name, entrySuffix)
	if !ok {
		return Key{}, false
	}
	k, err := ParseKey(hexKey)
	return k, err == nil
}

// prepareDir creates dir and proves that a temporary file can be created,
// locked and removed in it.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, path, err := createTemp(dir, Key{})
	if errors.Is(err, errTakenByCleaner) {
		return nil // the files were created: the directory is writable
	}
	if err != nil {
		return err
	}
	// Removed while its lock is held: once closed, a cleaner in another
	// process may remove it first.
	err = os.Remove(path)
	f.Close()
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return err
}

// createTemp creates a uniquely named temporary file in dir and locks it
// (flock), so a cleaner in another process can tell it from the leftover
// of a killed writer. The name is checked to still be this file after the
// lock is held: a cleaner only removes a temp file while holding its lock,
// so a file locked and still named is safe from cleaners until it is
// closed.
//
// A cleaner in another process that lists the directory in a tight loop
// can take a file between its creation and its lock; that window is a
// few microseconds, so a taken file is retried after a pause that grows,
// many more times than a name collision.
func createTemp(dir string, k Key) (*os.File, string, error) {
	var lastErr error
	for collisions, taken := 0, 0; collisions < 16 && taken < 64; {
		path := filepath.Join(dir, fmt.Sprintf("%s%s-%d-%016x", tempPrefix, k.String()[:16], os.Getpid(), rand.Uint64()))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			lastErr = err
			collisions++
			continue
		}
		if err != nil {
			return nil, "", err
		}
		locked, err := tryLock(f)
		if err != nil {
			f.Close()
			os.Remove(path)
			return nil, "", fmt.Errorf("lock %s: %w", path, err)
		}
		if !locked || !samePath(f, path) {
			f.Close() // a cleaner holds it or removed it: it will not be ours
			lastErr = fmt.Errorf("temporary file %s: %w", path, errTakenByCleaner)
			taken++
			time.Sleep(time.Duration(taken) * 50 * time.Microsecond)
			continue
		}
		return f, path, nil
	}
	return nil, "", fmt.Errorf("creating a temporary file in %s: %w", dir, lastErr)
}

// errTakenByCleaner: another process's cleaner took every temporary file
// createTemp made before it could lock it.
var errTakenByCleaner = errors.New("taken by a cleaner")

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// cleanTemp removes the temporary file at path if its writer is gone (its
// lock can be taken). It reports whether it removed it.
func cleanTemp(path string) bool {
	if !canLock {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	locked, err := tryLock(f)
	if err != nil || !locked || !samePath(f, path) {
		return false
	}
	return os.Remove(path) == nil
}

// diskError marks an error of the file system (as opposed to one of the
// caller's write function, or a payload of the wrong length): only those
// make the store evict (ENOSPC) or turn its disk tier off.
type diskError struct{ err error }

func (e diskError) Error() string { return e.err.Error() }
func (e diskError) Unwrap() error { return e.err }

func isDiskError(err error) bool {
	var d diskError
	return errors.As(err, &d)
}

// fileWriter streams a payload into a temporary file after its header
// region, computing the checksum.
type fileWriter struct {
	f        *os.File
	n, limit int64
	crc      uint32
	err      error
	hook     func(stage string, n int64) error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if int64(len(p)) > w.limit-w.n {
		w.err = fmt.Errorf("payload longer than meta.Size (%d bytes)", w.limit)
		return 0, w.err
	}
	if w.hook != nil {
		if err := w.hook("payload", w.n); err != nil {
			w.err = diskError{err}
			return 0, w.err
		}
	}
	n, err := w.f.Write(p)
	w.crc = crc32Update(w.crc, p[:n])
	w.n += int64(n)
	if err != nil {
		w.err = diskError{err}
		return n, w.err
	}
	return n, nil
}
