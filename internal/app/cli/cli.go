// Package cli holds what the k3 command's subcommands share: flag sets
// that report errors instead of exiting, usage errors and the exit code of
// every error, the flags that open a model (--model, --budget, --preset,
// ...), byte sizes and lists on the command line, and Ctrl-C contexts.
//
// A subcommand is a function of its arguments and standard streams that
// returns an error; the command (cmd/k3) prints the error and exits with
// ExitCode of it.
package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"runtime/pprof"
	"syscall"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/platform/crash"
)

// Exit codes of the k3 command.
const (
	ExitOK         = 0
	ExitFailure    = 1 // any error not named below
	ExitUsage      = 2 // a wrong command line, or options the library refuses
	ExitCheckpoint = 3 // a bad checkpoint or config
	ExitExpert     = 4 // an expert failed to load (the output is invalid)
	ExitBudget     = 5 // the RAM budget cannot hold the model
	ExitIO         = 6 // a missing or unreadable file, an I/O error
	ExitInternal   = 7 // a recovered panic: never reported as a usage error (the runtime's 2)
	// ExitInterrupted: Ctrl-C (SIGINT) ended the command, as a shell
	// reports a process SIGINT killed (128 + 2).
	ExitInterrupted = 130
)

// ErrInterrupted ends a command at Ctrl-C; it exits ExitInterrupted.
var ErrInterrupted = errors.New("interrupted")

// ErrHelp reports that --help was asked for and the usage printed: the
// command exits 0.
var ErrHelp = errors.New("help shown")

// UsageError is an error in the command line; it exits ExitUsage.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Sprintf(format, args...)}
}

// libraryCall matches the library's "k3: Function: " or "k3: Type.Method: "
// marks, which name its API for a program's logs.
var libraryCall = regexp.MustCompile(`(^|: )k3: ([A-Z][A-Za-z]*\.)?[A-Z][A-Za-z]*: `)

// Text is err's message for a user of the command: the library's marks
// that name its functions ("k3: LoadFile: ") are dropped; the rest, which
// says what went wrong and with what, stays.
func Text(err error) string {
	return libraryCall.ReplaceAllString(err.Error(), "$1")
}

// Tagged returns an error with the formatted message that wraps sentinel
// (for errors.Is and the exit code) without repeating its text.
func Tagged(sentinel error, format string, args ...any) error {
	return &tagged{msg: fmt.Sprintf(format, args...), err: sentinel}
}

type tagged struct {
	msg string
	err error
}

func (e *tagged) Error() string { return e.msg }
func (e *tagged) Unwrap() error { return e.err }

// ExitCode is the exit code for err, which a subcommand returned: nil and
// ErrHelp exit 0, a recovered panic (anything wrapping crash.ErrInternal) exits 7, Ctrl-C
// (ErrInterrupted) 130, a usage
// error or options the library refuses 2, and the library's sentinel
// errors and I/O errors their own codes; anything else exits 1.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return ExitOK
	case errors.Is(err, crash.ErrInternal):
		return ExitInternal
	case errors.Is(err, ErrInterrupted):
		return ExitInterrupted
	case errors.As(err, &ue), errors.Is(err, k3.ErrBadOptions), errors.Is(err, k3.ErrTokenOutOfRange), errors.Is(err, k3.ErrContextFull):
		return ExitUsage
	case errors.Is(err, k3.ErrExpertLoad):
		return ExitExpert
	case errors.Is(err, k3.ErrBadCheckpoint), errors.Is(err, k3.ErrBadConfig):
		return ExitCheckpoint
	case errors.Is(err, k3.ErrBudget):
		return ExitBudget
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EIO):
		return ExitIO
	}
	return ExitFailure
}

// StartCPUProfile starts a CPU profile of the process into the file at
// path (the --cpuprofile flags); stop ends it and closes the file. An
// empty path profiles nothing.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
