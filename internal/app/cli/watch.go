package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/progress"
)

// ProgressFlag is --progress, which every model command takes.
type ProgressFlag struct {
	mode       string
	registered bool // a ProgressFlag never registered means auto
}

// Register defines --progress on fs.
func (p *ProgressFlag) Register(fs *flag.FlagSet) {
	p.registered = true
	fs.StringVar(&p.mode, "progress", "auto", "how to show what the command is doing: auto (in place on a terminal; elsewhere a line every 10 s once the work lasts that long), lines (a line every 2 s, also on a terminal) or off")
}

// Mode returns the flag's mode; a bad value is a usage error.
func (p *ProgressFlag) Mode() (progress.Mode, error) {
	m, err := progress.ParseMode(p.mode)
	if p.mode == "" && p.registered {
		err = fmt.Errorf("want auto, lines or off, not an empty value")
	}
	if err != nil {
		return m, Usagef("--progress: %v", err)
	}
	return m, nil
}

// Watch shows on standard error what a model command is doing once the
// model is loaded, so that long work never looks hung: while a prompt is
// prefilled, its tokens done of total, the bytes read, their rate and the
// time left; while tokens are decoded, how many, the seconds and bytes per
// token, and what the token in flight has read so far. On a terminal the
// status is redrawn in place, beside the text and never inside it (write
// the text through Text); elsewhere it is a plain line now and then
// (progress.Line). A nil *Watch shows nothing.
type Watch struct {
	m    *k3.Model
	line *progress.Line
	plan *k3.MemoryPlan
	cfg  k3.Config

	mu sync.Mutex
	// The prefill: tokens fed of those asked for, since start (with the
	// bytes read then).
	fed, total  int
	start       time.Time
	startBytes  int64
	prefillDone time.Time
	// The prefill's passes so far, the tokens they fed (a restored prefix
	// not counted) and when the last ended.
	passes, passFed int
	lastPass        time.Time
	// The decode: tokens since the first (its time and bytes), the last.
	tokens                int
	firstTok, lastTok     time.Time
	firstBytes, lastBytes int64
	active                bool
	// Passes mode (Passes): the model's passes since start, by label.
	label       string
	startPasses int64
	startRows   int64

	stop, stopped chan struct{}
}

// NewWatch starts showing m's progress on w (standard error) in mode. Close
// it when the command is done.
func NewWatch(m *k3.Model, w io.Writer, mode progress.Mode) *Watch {
	x := &Watch{m: m, line: progress.NewLine(w, mode), plan: m.MemoryPlan(), cfg: m.Config(),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	if mode == progress.Off {
		close(x.stopped) // nothing to draw; Status still answers
		return x
	}
	every := time.Second
	if x.line.InPlace() {
		every = 250 * time.Millisecond
	}
	go x.loop(every)
	return x
}

// Watch starts showing m's progress as the --progress flag says; a bad
// value is a usage error.
func (p *ProgressFlag) Watch(m *k3.Model, w io.Writer) (*Watch, error) {
	mode, err := p.Mode()
	if err != nil {
		return nil, err
	}
	return NewWatch(m, w, mode), nil
}

func (x *Watch) loop(every time.Duration) {
	defer close(x.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
			if s := x.Status(); s != "" {
				x.line.Set(s)
			}
		}
	}
}

// Text returns a writer for text going to the status's terminal or stream
// (standard output, or standard error's own lines); see progress.Line.Text.
func (x *Watch) Text(w io.Writer) io.Writer {
	if x == nil {
		return w
	}
	return x.line.Text(w)
}

// Start begins a generation (a prompt's continuation, a chat turn, a
// batch): the counters start from zero.
func (x *Watch) Start() {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fed, x.total, x.tokens, x.active, x.label = 0, 0, 0, true, ""
	x.start, x.startBytes, x.prefillDone = time.Now(), x.m.Stats().BytesRead, time.Time{}
}

// Prefill adds a prompt of n tokens to the generation (n 0: as many as
// the step that feeds it has) and returns ctx carrying the progress
// function that counts its tokens as the passes feed them
// (k3.WithProgress). Several prompts, prefilled together in shared
// passes, add up. Only the first step made with ctx is the prompt's; the
// decoding steps after it are counted by Token.
func (x *Watch) Prefill(ctx context.Context, n int) context.Context {
	if x == nil {
		return ctx
	}
	x.mu.Lock()
	if !x.active {
		x.mu.Unlock()
		x.Start()
		x.mu.Lock()
	}
	if n > 0 {
		x.total += n
	}
	x.mu.Unlock()
	steps, offset, last := 0, 0, 0
	return k3.WithProgress(ctx, func(p k3.Progress) {
		if p.Done == 0 { // a step starts
			if steps++; steps > 1 {
				return
			}
			x.mu.Lock()
			if n <= 0 {
				n = p.Total
				x.total += n
			}
			// A prefix the prefix cache restored is not fed: it counts
			// as done.
			offset = max(n-p.Total, 0)
			last = offset
			x.fed += offset
			x.mu.Unlock()
			return
		}
		if steps != 1 {
			return
		}
		cur := min(offset+p.Done, n)
		if cur <= last {
			return
		}
		now := time.Now()
		x.mu.Lock()
		x.fed += cur - last
		x.passFed += cur - last
		// Sessions that shared the pass report it one after the other,
		// at once: one pass.
		if now.Sub(x.lastPass) > p.PassTime/2 {
			x.passes++
		}
		x.lastPass = now
		if x.fed >= x.total {
			x.prefillDone = now
		}
		x.mu.Unlock()
		last = cur
	})
}

// Passes shows the model's work from its own counters since now, under
// label: the passes over the weights, their rows, the bytes read and
// their rate. It is for commands whose steps run elsewhere (a server in
// the process, a batch job), whose sequences the watch does not see.
func (x *Watch) Passes(label string) {
	if x == nil {
		return
	}
	st := x.m.Stats()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fed, x.total, x.tokens, x.active = 0, 0, 0, true
	x.start, x.startBytes, x.prefillDone = time.Now(), st.BytesRead, time.Time{}
	x.label, x.startPasses, x.startRows = label, st.Passes, st.Rows
}

// Token counts a generated token.
func (x *Watch) Token() {
	if x == nil {
		return
	}
	now := time.Now()
	b := x.m.Stats().BytesRead
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.active {
		x.active, x.start, x.startBytes = true, now, b
	}
	if x.tokens == 0 {
		x.firstTok, x.firstBytes = now, b
	}
	x.tokens++
	x.lastTok, x.lastBytes = now, b
}

// Idle ends the generation: the status is erased and stays so until the
// next Start or Prefill (a chat waiting for its user).
func (x *Watch) Idle() {
	if x == nil {
		return
	}
	x.mu.Lock()
	x.active = false
	x.mu.Unlock()
	x.line.Clear()
}

// Close stops the watch and erases the status.
func (x *Watch) Close() {
	if x == nil {
		return
	}
	select {
	case <-x.stop:
	default:
		close(x.stop)
	}
	<-x.stopped
	x.Idle()
}

// Status is the status line now ("" when idle).
func (x *Watch) Status() string {
	st := x.m.Stats()
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.active {
		return ""
	}
	if x.label != "" {
		read, el := st.BytesRead-x.startBytes, now.Sub(x.start)
		p := fmt.Sprintf("%s: %s passes · %s rows · %s read", x.label, thousands(int(st.Passes-x.startPasses)), thousands(int(st.Rows-x.startRows)), gb(read))
		if el >= time.Second && read > 0 {
			p += fmt.Sprintf(" · %.2f GB/s", float64(read)/el.Seconds()/1e9)
		}
		return p + " · " + Duration(el)
	}
	var parts []string
	if x.total > 0 && x.fed < x.total {
		read := st.BytesRead - x.startBytes
		el := now.Sub(x.start)
		p := fmt.Sprintf("prefill %s/%s tokens · %s read", thousands(x.fed), thousands(x.total), gb(read))
		if el >= time.Second && read > 0 {
			p += fmt.Sprintf(" · %.2f GB/s", float64(read)/el.Seconds()/1e9)
		}
		if left, ok := x.prefillLeft(read, el); ok {
			p += " · ~" + Duration(left) + " left"
		}
		parts = append(parts, p)
	}
	if x.tokens > 0 {
		p := fmt.Sprintf("decode %s token%s", thousands(x.tokens), plural(x.tokens))
		if n := x.tokens - 1; n > 0 {
			span := x.lastTok.Sub(x.firstTok)
			if per := span.Seconds() / float64(n); per >= 1 {
				p += fmt.Sprintf(" · %.1f s/token", per)
			} else {
				p += fmt.Sprintf(" · %.1f tokens/s", float64(n)/math.Max(span.Seconds(), 1e-9))
			}
			if b := (x.lastBytes - x.firstBytes) / int64(n); b > 0 {
				p += " · " + gb(b) + "/token"
			}
		}
		// The token in flight: what it has read so far.
		if wait := now.Sub(x.lastTok); wait >= 2*time.Second {
			read := st.BytesRead - x.lastBytes
			p += fmt.Sprintf(" · next token %s", Duration(wait))
			if read > 0 {
				p += fmt.Sprintf(", %s read at %.2f GB/s", gb(read), float64(read)/wait.Seconds()/1e9)
			}
		}
		parts = append(parts, p)
	} else if x.total > 0 && x.fed >= x.total && !x.prefillDone.IsZero() {
		parts = append(parts, fmt.Sprintf("prefill done in %s · sampling", Duration(x.prefillDone.Sub(x.start))))
	}
	return strings.Join(parts, " | ")
}

// prefillLeft estimates the time the prefill still takes (x.mu held).
// Once a pass has ended: the passes left, of the rows the passes have had
// (the engine may widen them while prompts wait), at the time they have
// taken. Before: for a prompt that one pass of the memory plan's rows
// holds, the bytes that pass will read (the plan's trunk per pass and
// the routed experts of uniform routing over its rows, less the cache's
// share) at the rate read so far.
func (x *Watch) prefillLeft(read int64, el time.Duration) (time.Duration, bool) {
	if x.passes > 0 && x.passFed > 0 {
		per := x.lastPass.Sub(x.start) / time.Duration(x.passes)
		rows := max(x.passFed/x.passes, 1)
		passes := (x.total - x.fed + rows - 1) / rows
		return max(time.Duration(passes)*per-time.Since(x.lastPass), 0), true
	}
	if el < 2*time.Second || (x.plan.Rows > 0 && x.total > x.plan.Rows) {
		return 0, false
	}
	want := x.passBytes(x.total)
	if want <= 0 || read <= 0 || float64(read) >= 0.98*want {
		return 0, false
	}
	rate := float64(read) / el.Seconds()
	return time.Duration((want - float64(read)) / rate * float64(time.Second)), true
}

// passBytes is what one pass of r rows is expected to read (x.mu held).
func (x *Watch) passBytes(r int) float64 {
	p, c := x.plan, x.cfg
	hit := 1.0
	if all := float64(c.Experts * c.MoELayers); all > 0 {
		hit = math.Min(1, float64(p.CacheSlots)/all)
	}
	union := float64(c.Experts) * (1 - math.Pow(1-float64(c.TopK)/float64(max(c.Experts, 1)), float64(r)))
	return float64(p.TrunkBytesPerPass) + float64(c.MoELayers)*union*float64(p.CacheSlotBytes)*(1-hit)
}

// gb prints a byte count in GB (MB below 1 GB).
func gb(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// thousands prints n with thousands separators.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Duration prints d for a person: 45s, 3m10s, 2h05m.
func Duration(d time.Duration) string {
	switch s := int(d.Round(time.Second) / time.Second); {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s/60%60)
	}
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
