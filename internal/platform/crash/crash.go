// Package crash turns a panic on one of the engine's goroutines (an I/O
// worker, the trunk's loader, a kernel worker, the batcher) into an error
// for the caller that waits on that work, with the panicking goroutine's
// stack, instead of the runtime killing the process with exit code 2. A
// panic is a bug: the work it was part of is lost (the sequences of the
// pass it hit must be reset), but the process and the other sequences go
// on, and the caller decides what to report.
package crash

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrInternal is wrapped by every Error.
var ErrInternal = errors.New("internal error")

// Error is a recovered panic: where it happened, the panic's value and
// the stack of the goroutine that panicked.
type Error struct {
	Where string
	Value any
	Stack []byte
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v in %s: %v (a bug; please report it with its stack)", ErrInternal, e.Where, e.Value)
}

// Unwrap makes errors.Is(err, ErrInternal) hold, and exposes the panic's
// value when it was an error.
func (e *Error) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrInternal, err}
	}
	return []error{ErrInternal}
}

// New wraps a recovered panic value p (nil: no panic, nil error). A value
// that is already an *Error (a panic re-raised on another goroutine) is
// kept, with its original stack.
func New(where string, p any) error {
	if p == nil {
		return nil
	}
	if e, ok := p.(*Error); ok {
		return e
	}
	return &Error{Where: where, Value: p, Stack: debug.Stack()}
}

// Catch, deferred, recovers a panic of the current goroutine into *errp
// (unless *errp already holds an error): defer crash.Catch("trunk load",
// &err).
func Catch(where string, errp *error) {
	if p := recover(); p != nil {
		err := New(where, p)
		if *errp == nil {
			*errp = err
		}
	}
}

// Stack returns the stack recorded in err's chain, nil if it holds no
// Error.
func Stack(err error) []byte {
	var e *Error
	if errors.As(err, &e) {
		return e.Stack
	}
	return nil
}
