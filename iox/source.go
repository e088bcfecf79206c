package iox

import "io"

// Source is something iox can read from: random access, a size and a name
// for error messages. [*File] is the fast path; [NewSource] wraps anything
// else (an [io.SectionReader], a bytes.Reader, an fs.File that implements
// ReadAt, a test double).
//
// ReadAt must be safe for concurrent use: a [Reader] calls it from several
// workers at once.
type Source interface {
	io.ReaderAt
	// Size is the number of readable bytes. For a [*File] it is the size
	// recorded at open.
	Size() int64
	// Name identifies the source in errors (a path for a file).
	Name() string
}

// NewSource returns a Source reading from r, of the given size and name.
// If r implements [io.Closer], so does the returned Source.
func NewSource(r io.ReaderAt, size int64, name string) Source {
	if c, ok := r.(io.Closer); ok {
		return &closingSource{readerAtSource{r, size, name}, c}
	}
	return &readerAtSource{r, size, name}
}

type readerAtSource struct {
	r    io.ReaderAt
	size int64
	name string
}

func (s *readerAtSource) ReadAt(p []byte, off int64) (int, error) { return s.r.ReadAt(p, off) }
func (s *readerAtSource) Size() int64                             { return s.size }
func (s *readerAtSource) Name() string                            { return s.name }

type closingSource struct {
	readerAtSource
	c io.Closer
}

func (s *closingSource) Close() error { return s.c.Close() }
