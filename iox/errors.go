package iox

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned for requests submitted to, or still queued in, a
	// closed [Reader], and for reads from a closed [File].
	ErrClosed = errors.New("iox: closed")
	// ErrFileChanged reports a file whose size or modification time differs
	// from what was recorded at open ([File.CheckSize]).
	ErrFileChanged = errors.New("iox: file changed on disk since open")
	// ErrOutOfRange reports a request beyond the end of its source.
	ErrOutOfRange = errors.New("iox: read beyond end of source")
	// ErrBadRequest reports a malformed [Request] (nil source, negative
	// offset or length, Dst shorter than the window).
	ErrBadRequest = errors.New("iox: invalid request")
	// ErrInsufficientSpace is returned by [ProbeBandwidth] when the
	// directory's file system lacks room for the probe file.
	ErrInsufficientSpace = errors.New("iox: insufficient free space")
)

// ReadError is the error of a failed read: which source, which payload, and
// why. Err wraps the cause: a syscall.Errno such as syscall.EIO (match with
// errors.Is), io.ErrUnexpectedEOF for a source that ended early,
// [ErrFileChanged] when the file was truncated after open, [ErrOutOfRange],
// [ErrBadRequest].
//
// Off and Len are the request's payload. Cancellation and [ErrClosed] are
// returned bare, not as a ReadError.
type ReadError struct {
	File string
	Off  int64
	Len  int
	Err  error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("iox: read %s at offset %d, length %d: %v", e.File, e.Off, e.Len, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }
