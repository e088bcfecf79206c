package iox

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotRegular reports a path that names a FIFO, a device, a socket or a
// directory where a file is expected: opening a FIFO blocks until a writer
// appears, and a device such as /dev/zero never ends.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge reports a file larger than k3 will read into memory.
var ErrTooLarge = errors.New("file too large")

// OpenRegular opens path for reading if it is a regular file; a symlink to
// one is fine (it is how shards are spread over drives). The path is
// checked before the open, and the descriptor after it (opened
// non-blocking, so a FIFO swapped in between the two cannot block).
func OpenRegular(path string) (*os.File, os.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, notRegular(path, fi)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(path, fi)
	}
	return f, fi, nil
}

func notRegular(path string, fi os.FileInfo) error {
	return fmt.Errorf("%s: %w (%v)", path, ErrNotRegular, fi.Mode().Type())
}

// ReadFileLimit reads a regular file (see OpenRegular) of at most limit
// bytes. The size is checked before anything is read, and the read stops
// at the limit if the file grows meanwhile.
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, fi, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, tooLarge(path, fi.Size(), limit)
	}
	// One buffer of the size found (plus one byte to see growth), not
	// io.ReadAll's doublings: an index is tens of MB.
	b := make([]byte, 0, min(fi.Size(), limit)+1)
	b, err = readAll(io.LimitReader(f, limit+1), b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(path, int64(len(b)), limit)
	}
	return b, nil
}

// readAll appends r's bytes to b until EOF, growing b only if it is full.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s: %w: %d bytes or more, above the %d-byte limit", path, ErrTooLarge, size, limit)
}
