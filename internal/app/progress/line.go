package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Mode says how a Line shows its status.
type Mode int

const (
	// Auto redraws the status in place on a terminal; anywhere else
	// (a pipe, a file, a log collector) it prints a plain line every
	// AutoEvery, once the work has lasted that long, so short commands
	// print nothing.
	Auto Mode = iota
	// Lines prints a plain line every LinesEvery, on a terminal too.
	Lines
	// Off shows nothing.
	Off
)

// Intervals of the plain lines.
const (
	AutoEvery  = 10 * time.Second
	LinesEvery = 2 * time.Second
)

// ParseMode reads the --progress flag's value: auto, lines or off.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return Auto, nil
	case "lines":
		return Lines, nil
	case "off":
		return Off, nil
	}
	return Auto, fmt.Errorf("want auto, lines or off, not %q", s)
}

// idle is how long the text must have been quiet before a terminal's
// status is drawn beside it: text that streams quickly speaks for itself.
const idle = 700 * time.Millisecond

// Line is a one-line status (what a command is doing, how far it got),
// shown on a terminal in place, after whatever text is there and erased
// before more text comes, or elsewhere as plain lines now and then. The
// text a command writes to the same terminal must go through Text, so
// that the status never lands inside it. It is safe for concurrent use.
type Line struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool // in place
	off     bool
	every   time.Duration // plain lines
	start   time.Time
	last    time.Time // the last plain line
	shown   int       // columns of the status on screen; 0: none
	col     int       // the terminal's column after the text written through Text
	written time.Time // when text was last written
	width   func() int
	now     func() time.Time
	shares  func(io.Writer) bool // whether a writer's text lands where the status does
}

// NewLine returns a Line writing its status to w (standard error) in
// mode m.
func NewLine(w io.Writer, m Mode) *Line {
	l := &Line{w: w, start: time.Now(), now: time.Now, width: func() int { return 80 }, shares: func(t io.Writer) bool { return sameFile(t, w) }}
	f, isFile := w.(*os.File)
	switch {
	case m == Off:
		l.off = true
	case m == Auto && isFile && IsTerminal(f):
		l.tty = true
		l.width = func() int { return termWidth(f) }
	case m == Lines:
		l.every = LinesEvery
	default:
		l.every = AutoEvery
	}
	return l
}

// InPlace reports whether the status is redrawn in place (a terminal).
func (l *Line) InPlace() bool { return l.tty }

// Set shows status: on a terminal now (unless text was written in the
// last moment; the next Set draws it), elsewhere as a plain line when
// one is due.
func (l *Line) Set(status string) {
	if l == nil || l.off {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.tty {
		if now.Sub(l.start) < l.every || now.Sub(l.last) < l.every {
			return
		}
		l.last = now
		nl := ""
		if l.col > 0 { // an unfinished line of text (stdout and stderr may be one file)
			nl = "\n"
		}
		fmt.Fprintf(l.w, "%s%s\n", nl, status)
		return
	}
	if now.Sub(l.written) < idle {
		return
	}
	l.draw(status)
}

// draw puts status on the terminal after the cursor, dimmed, and moves
// the cursor back to where it was, cut to what is left of the line so
// that it never wraps (l.mu held).
func (l *Line) draw(status string) {
	var b strings.Builder
	if l.shown > 0 {
		b.WriteString("\x1b[K")
	}
	w := l.width()
	room := w - l.col%w - 1
	lead := ""
	if l.col%w > 0 {
		lead = "  "
		room -= 2
	}
	status = cut(status, room)
	n := utf8.RuneCountInString(status)
	if room < 12 || n == 0 {
		l.shown = 0
		fmt.Fprint(l.w, b.String())
		return
	}
	n += len(lead)
	fmt.Fprintf(&b, "%s\x1b[2m%s\x1b[0m\x1b[%dD", lead, status, n)
	l.shown = n
	fmt.Fprint(l.w, b.String())
}

// cut shortens s to at most n runes, with an ellipsis.
func cut(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Clear erases the status from a terminal.
func (l *Line) Clear() {
	if l == nil || !l.tty {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.erase()
}

func (l *Line) erase() {
	if l.shown > 0 {
		fmt.Fprint(l.w, "\x1b[K")
		l.shown = 0
	}
}

// Text returns a writer for text that shares the status's terminal or
// stream (standard output, or standard error's own messages): each write
// first erases the status, and the Line follows the column the text ends
// at, so that the status is drawn beside it and a plain line never
// splits it. Wrap the file itself, under any buffering.
func (l *Line) Text(w io.Writer) io.Writer {
	if l == nil || l.off {
		return w
	}
	if !l.shares(w) {
		return w // elsewhere: nothing to keep apart
	}
	return textWriter{l: l, w: w}
}

type textWriter struct {
	l *Line
	w io.Writer
}

func (t textWriter) Write(p []byte) (int, error) {
	l := t.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.erase()
	l.written = l.now()
	l.col = advance(l.col, p)
	return t.w.Write(p)
}

// sameFile reports whether text written to a and b lands in one place:
// the same terminal, pipe or file (as with 2>&1), or writers that are not
// files (taken to share).
func sameFile(a, b io.Writer) bool {
	fa, okA := a.(*os.File)
	fb, okB := b.(*os.File)
	if !okA || !okB {
		return true
	}
	sa, errA := fa.Stat()
	sb, errB := fb.Stat()
	return errA != nil || errB != nil || os.SameFile(sa, sb)
}

// advance returns the column after writing p at column col: newlines and
// carriage returns go back to 0, escape sequences take no room, wide
// characters two columns.
func advance(col int, p []byte) int {
	const (
		text = iota
		escape
		csi
	)
	state := text
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		p = p[n:]
		switch {
		case state == escape:
			state = text
			if r == '[' {
				state = csi
			}
		case state == csi:
			if r >= '@' && r <= '~' {
				state = text
			}
		case r == '\x1b':
			state = escape
		case r == '\n' || r == '\r':
			col = 0
		case r == '\t':
			col = (col/8 + 1) * 8
		case r < ' ' || r == 0x7f:
		case wide(r):
			col += 2
		default:
			col++
		}
	}
	return col
}

// wide reports whether r takes two columns on a terminal (East Asian wide
// and full-width characters, most emoji).
func wide(r rune) bool {
	return r >= 0x1100 && (r <= 0x115f || r == 0x2329 || r == 0x232a ||
		(r >= 0x2e80 && r <= 0xa4cf && r != 0x303f) || (r >= 0xac00 && r <= 0xd7a3) ||
		(r >= 0xf900 && r <= 0xfaff) || (r >= 0xfe30 && r <= 0xfe6f) || (r >= 0xff00 && r <= 0xff60) ||
		(r >= 0xffe0 && r <= 0xffe6) || (r >= 0x1f300 && r <= 0x1f64f) || (r >= 0x1f900 && r <= 0x1f9ff) ||
		(r >= 0x20000 && r <= 0x3fffd))
}
