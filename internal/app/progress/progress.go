// Package progress draws a one-line progress bar on a terminal. It draws
// nothing when the output is not a terminal, so logs and pipes stay clean.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Bar is a progress bar for a byte count. It is safe for concurrent use.
type Bar struct {
	w       io.Writer
	label   string
	total   int64
	start   time.Time
	mu      sync.Mutex
	last    time.Time
	enabled bool
}

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// New returns a bar that writes to f only if f is a terminal.
func New(f *os.File, label string, total int64) *Bar {
	return &Bar{w: f, label: label, total: total, start: time.Now(), enabled: IsTerminal(f)}
}

// Update redraws the bar for done bytes, at most ten times a second.
func (b *Bar) Update(done int64) {
	if b == nil || !b.enabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && done < b.total {
		return
	}
	b.last = now
	frac := 0.0
	if b.total > 0 {
		frac = float64(done) / float64(b.total)
	}
	const width = 30
	n := min(int(frac*width), width)
	el := now.Sub(b.start).Seconds()
	rate := float64(done) / max(el, 1e-9) / 1e6
	eta := ""
	if done > 0 && done < b.total {
		eta = fmt.Sprintf(" eta %s", time.Duration(float64(b.total-done)/float64(done)*el*float64(time.Second)).Round(time.Second))
	}
	fmt.Fprintf(b.w, "\r%s [%s%s] %5.1f%% %.0f MB/s%s   ", b.label, strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*frac, rate, eta)
}

// Done finishes the line.
func (b *Bar) Done() {
	if b == nil || !b.enabled {
		return
	}
	b.Update(b.total)
	fmt.Fprintln(b.w)
}
