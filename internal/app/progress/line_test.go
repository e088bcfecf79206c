package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// clock is a settable time for a Line under test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newTestLine(w io.Writer, tty bool, c *clock) *Line {
	l := &Line{w: w, tty: tty, every: LinesEvery, start: c.t, now: c.now, width: func() int { return 60 },
		shares: func(io.Writer) bool { return true }}
	return l
}

// TestLinePlain: away from a terminal the status is a plain line, first
// once the work has lasted the interval, then at most once per interval;
// after unfinished text it starts on a line of its own.
func TestLinePlain(t *testing.T) {
	var out bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	l := newTestLine(&out, false, c)
	text := l.Text(&out)
	l.Set("too early")
	c.add(LinesEvery)
	l.Set("one")
	c.add(time.Second)
	l.Set("too soon")
	fmt.Fprint(text, "some text")
	c.add(LinesEvery)
	l.Set("two")
	if got, want := out.String(), "one\nsome text\ntwo\n"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestLineTerminal: on a terminal the status is drawn dimmed after the
// text with the cursor put back, erased before the next text, not drawn
// while text streams, cut to the line's width.
func TestLineTerminal(t *testing.T) {
	var out bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	l := newTestLine(&out, true, c)
	text := l.Text(&out)
	l.Set("prefill 3/10")
	if got, want := out.String(), "\x1b[2mprefill 3/10\x1b[0m\x1b[12D"; got != want {
		t.Fatalf("first draw %q, want %q", got, want)
	}
	out.Reset()
	fmt.Fprint(text, "Paris")
	if got, want := out.String(), "\x1b[KParis"; got != want {
		t.Fatalf("text %q, want the status erased first: %q", got, want)
	}
	out.Reset()
	l.Set("decode 1") // text was just written
	if out.Len() != 0 {
		t.Fatalf("drawn while text streams: %q", out.String())
	}
	c.add(time.Second)
	l.Set(strings.Repeat("x", 100))
	got := out.String()
	if !strings.HasPrefix(got, "  \x1b[2mxxx") || !strings.Contains(got, "…") || !strings.HasSuffix(got, "\x1b[54D") {
		t.Fatalf("status after 5 columns of text on a 60-column line: %q", got)
	}
	out.Reset()
	l.Clear()
	l.Clear()
	if got := out.String(); got != "\x1b[K" {
		t.Fatalf("clear: %q", got)
	}
}

// TestAdvance counts columns as a terminal does.
func TestAdvance(t *testing.T) {
	for _, c := range []struct {
		col  int
		text string
		want int
	}{
		{0, "abc", 3}, {5, "ab\ncd", 2}, {3, "x\r", 0}, {0, "\x1b[2mdim\x1b[0m", 3}, {0, "\x1b7ab", 2},
		{0, "日本", 4}, {0, "a\tb", 9}, {2, "é", 3},
	} {
		if got := advance(c.col, []byte(c.text)); got != c.want {
			t.Errorf("advance(%d, %q) = %d, want %d", c.col, c.text, got, c.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"auto": Auto, "": Auto, "lines": Lines, "off": Off} {
		if m, err := ParseMode(s); err != nil || m != want {
			t.Errorf("%q: %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("on"); err == nil {
		t.Error("on accepted")
	}
}

// TestSameFile: two descriptors of one file share, two files do not,
// writers that are not files are taken to share.
func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	a, err := os.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a2, err := os.OpenFile(dir+"/a", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	b, err := os.Create(dir + "/b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var buf bytes.Buffer
	if !sameFile(a, a2) || sameFile(a, b) || !sameFile(&buf, a) {
		t.Fatalf("same file: a,a2 %v; a,b %v; buffer,a %v", sameFile(a, a2), sameFile(a, b), sameFile(&buf, a))
	}
}
