package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/k3go/k3/internal/app/progress"
)

// Steps says on standard error what a command is reading or measuring
// while it does so, with the time the step has taken so far (a status
// line; see progress.Line), so that seconds of header parsing or disk
// probing do not look hung. A nil *Steps says nothing.
type Steps struct {
	line *progress.Line

	mu    sync.Mutex
	what  string
	since time.Time

	stop, stopped chan struct{}
}

// NewSteps starts a status line on w in mode.
func NewSteps(w io.Writer, mode progress.Mode) *Steps {
	s := &Steps{line: progress.NewLine(w, mode), stop: make(chan struct{}), stopped: make(chan struct{})}
	if mode == progress.Off {
		close(s.stopped)
		return s
	}
	every := time.Second
	if s.line.InPlace() {
		every = 250 * time.Millisecond
	}
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.show()
			}
		}
	}()
	return s
}

// Step says what the command does now.
func (s *Steps) Step(format string, args ...any) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.what, s.since = fmt.Sprintf(format, args...), time.Now()
	s.mu.Unlock()
	s.show()
}

func (s *Steps) show() {
	s.mu.Lock()
	what, el := s.what, time.Since(s.since)
	s.mu.Unlock()
	if what == "" {
		return
	}
	if el >= time.Second {
		what = Duration(el) + ": " + what // first: a narrow terminal cuts the end
	}
	s.line.Set(what)
}

// Done erases the status and stops.
func (s *Steps) Done() {
	if s == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.stopped
	s.line.Clear()
}

// CheckpointFiles says what reading a checkpoint's headers reads: its
// config and how many shards' headers, and the weights they describe (none
// of which is read).
func CheckpointFiles(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return dir
	}
	n, size := 0, int64(0)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		n++
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
			size += fi.Size()
		}
	}
	return fmt.Sprintf("the config and %d shard header%s in %s (%s of weights, not read)", n, plural(n), dir, humanBytes(size))
}

// humanBytes prints a size in decimal units (1.56 TB).
func humanBytes(n int64) string {
	switch {
	case n >= 1e12:
		return fmt.Sprintf("%.2f TB", float64(n)/1e12)
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	default:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
}
