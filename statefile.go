package k3

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Save writes the session's state (its tokens, the KDA recurrent state and
// conv histories, the MLA cache) to w. A session restored from it continues
// exactly where this one stands: same logits, same tokens.
func (s *Session) Save(w io.Writer) error {
	if err := s.usable("Save"); err != nil {
		return err
	}
	if s.broken {
		return fmt.Errorf("k3: Save: session unusable after a failed step; call Reset")
	}
	ms, err := s.state()
	if err != nil {
		return err
	}
	if err := ms.Save(w, s.tokens, s.pending); err != nil {
		return fmt.Errorf("k3: saving session: %w", err)
	}
	return nil
}

// SaveFile writes the state to path safely: into a temporary file in the
// same directory, synced, then renamed over path. It refuses to write into
// the checkpoint directory.
func (s *Session) SaveFile(path string) (err error) {
	if err := s.usable("SaveFile"); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if same(dir, s.m.e.ck.Dir) {
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
func (s *Session) Load(r io.Reader) error {
	if err := s.usable("Load"); err != nil {
		return err
	}
	return s.load(r, -1)
}

// load is Load with the stream's length, checked exactly against the
// header when known (size >= 0).
func (s *Session) load(r io.Reader, size int64) error {
	ms, err := s.state()
	if err != nil {
		return fmt.Errorf("k3: loading session: %w", err)
	}
	tokens, pending, err := ms.Load(r, size)
	s.tokens, s.pending = s.tokens[:0], s.pending[:0]
	s.broken = false
	if err != nil {
		return fmt.Errorf("k3: loading session: %w", err)
	}
	s.tokens = append(s.tokens, tokens...)
	s.pending = append(s.pending, pending...)
	return nil
}

// LoadFile replaces the session's state with the one saved at path.
func (s *Session) LoadFile(path string) error {
	if err := s.usable("LoadFile"); err != nil {
		return err
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
	return s.load(f, st.Size())
}

func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
