package k3

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/k3go/k3/internal/engine"
)

// Session is one sequence: the KDA recurrent state, the short-conv
// histories and the latent MLA cache of everything fed so far. Sessions of
// one Model run independently and may be used from different goroutines;
// one Session is not safe for concurrent use.
type Session struct {
	m *Model
	s *engine.Seq
}

// NewSession starts an empty sequence with room for Options.MaxContext
// positions. Its state (KDA state, conv histories, MLA cache) is allocated
// when it is first used and released by Close. Under a RAM budget, at most
// Options.Sessions sessions hold state at once: a step of one more fails
// with ErrBudget until another is closed.
func (m *Model) NewSession() *Session {
	return &Session{m: m, s: m.e.NewSeq()}
}

// Close releases the session's state and its place in the RAM budget.
// The session is then unusable: every later method fails with ErrClosed
// (Len is 0), and Close again does nothing. Reset is what empties a
// session for reuse.
func (s *Session) Close() { s.s.Close() }

// Len returns the length of the sequence: tokens fed plus pending ones.
func (s *Session) Len() int { return s.s.Len() }

// Tokens returns the sequence so far (a copy), pending tokens included.
func (s *Session) Tokens() []int { return s.s.Tokens() }

// Reset empties the session, keeping its allocations, so that it starts a
// new sequence; it also recovers a session a failed step left unusable.
// On a closed session it does nothing.
func (s *Session) Reset() { s.s.Reset() }

// Step appends tokens to the sequence (after any pending ones) and returns
// the logits of the last position (vocab values). The slice is owned by the
// session and valid until its next call; copy it to keep it.
//
// Steps of sessions used from different goroutines at the same time share
// passes over the weights; the results are exactly those of the session
// alone. A step whose context ends while it waits for a pass, or while
// other sessions' steps share its passes, leaves at the next pass
// boundary: the tokens fed so far stay in the sequence (Len counts them)
// and the session stays usable. A step alone in its pass stops at once
// instead, and like any other failed step (an I/O error, a closed model)
// leaves the session unusable until Reset.
func (s *Session) Step(ctx context.Context, tokens []int) ([]float32, error) {
	return s.s.Step(ctx, tokens)
}

// Logits appends tokens like Step and returns the logits of every one of
// their positions (len(tokens)×vocab values, position-major; a new slice).
// It is teacher forcing: one forward over the tokens.
func (s *Session) Logits(ctx context.Context, tokens []int) ([]float32, error) {
	return s.s.Logits(ctx, tokens)
}

// Fork returns a new session holding a copy of this one's sequence and
// state (pending tokens included), so that several continuations of one
// prompt share its prefill: each fork then continues exactly, bit for
// bit, as this session would. The fork takes its own place in the RAM
// budget (ErrBudget when none is left) and must be closed. The state is
// copied through a pipe, so the copy needs no buffer of the state's size.
func (s *Session) Fork() (*Session, error) {
	f, err := s.s.Fork()
	if err != nil {
		return nil, err
	}
	return &Session{m: s.m, s: f}, nil
}

// Save writes the session's state (its tokens, the KDA recurrent state and
// conv histories, the MLA cache) to w. A session restored from it continues
// exactly where this one stands: same logits, same tokens.
func (s *Session) Save(w io.Writer) error { return s.s.Save(w) }

// SaveFile writes the state to path safely: into a temporary file in the
// same directory, synced, then renamed over path. It refuses to write into
// the checkpoint directory.
func (s *Session) SaveFile(path string) (err error) {
	if s.s.Closed() {
		return fmt.Errorf("k3: SaveFile: session %w", ErrClosed)
	}
	dir := filepath.Dir(path)
	if sameDir(dir, s.m.e.CheckpointDir()) {
		return fmt.Errorf("k3: SaveFile: %w: refusing to write into the checkpoint directory %s", ErrBadOptions, dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("k3: SaveFile: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = s.Save(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("k3: SaveFile: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("k3: SaveFile: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("k3: SaveFile: %w", err)
	}
	return nil
}

// Load replaces the session's state with one written by Save. It reads
// exactly the length the state's header declares, never past it, so a
// state may be followed by other data in r. On error the session is empty
// and usable.
func (s *Session) Load(r io.Reader) error { return s.s.Load(r, -1) }

// LoadFile replaces the session's state with the one saved at path.
func (s *Session) LoadFile(path string) error {
	if s.s.Closed() {
		return fmt.Errorf("k3: LoadFile: session %w", ErrClosed)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("k3: LoadFile: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("k3: LoadFile: %w", err)
	}
	return s.s.Load(f, st.Size())
}

func sameDir(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// Speculation returns how many drafted tokens the session's speculative
// steps verified (GenerateOptions.Speculate) and how many of them were
// accepted, since the session was created: each accepted draft is a token
// that cost no pass of its own.
func (s *Session) Speculation() (drafted, accepted int64) { return s.s.SpecCounts() }
