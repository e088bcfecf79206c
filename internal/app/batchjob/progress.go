package batchjob

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// reporter draws the job's progress: requests done of the total, failures,
// tokens per second and an ETA from this run's rate. On a terminal it
// redraws one line in place; elsewhere it writes a plain line every
// period, so logs stay readable.
type reporter struct {
	w      io.Writer
	term   bool
	every  time.Duration
	total  int // requests this run has to do
	before int // requests done before this run
	detail func() string

	mu       sync.Mutex
	start    time.Time
	done     int
	failed   int
	tokens   int64
	lastDraw time.Time
	stop     chan struct{}
	stopped  chan struct{}
}

// newReporter starts drawing; detail (may be nil) is set before its
// goroutine starts, which reads it under r.mu.
func newReporter(w io.Writer, term bool, every time.Duration, before, total int, detail func() string) *reporter {
	r := &reporter{w: w, term: term, every: every, total: total, before: before, start: time.Now(),
		stop: make(chan struct{}), stopped: make(chan struct{}), detail: detail}
	if term {
		r.every = min(every, time.Second) // keep the ETA and rate moving
	}
	go r.tick()
	return r
}

func (r *reporter) tick() {
	defer close(r.stopped)
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			r.draw(time.Now())
			r.mu.Unlock()
		}
	}
}

// add records one written line.
func (r *reporter) add(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
	r.tokens += o.tokens
	if o.failed {
		r.failed++
	}
	if now := time.Now(); r.term && now.Sub(r.lastDraw) >= 100*time.Millisecond {
		r.draw(now)
	}
}

// finish stops the ticker and draws the last line.
func (r *reporter) finish() {
	close(r.stop)
	<-r.stopped
	r.mu.Lock()
	defer r.mu.Unlock()
	r.draw(time.Now())
	if r.term {
		fmt.Fprintln(r.w)
	}
}

// draw writes the line; r.mu is held.
func (r *reporter) draw(now time.Time) {
	r.lastDraw = now
	line := r.format(now.Sub(r.start))
	if r.term {
		fmt.Fprintf(r.w, "\r%s %s\x1b[K", r.bar(20), line)
		return
	}
	fmt.Fprintln(r.w, line)
}

// bar is a bar of width cells for the share of requests done.
func (r *reporter) bar(width int) string {
	n := width
	if all := r.before + r.total; all > 0 {
		n = width * (r.before + r.done) / all
	}
	return "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + "]"
}

// format renders the progress after elapsed.
func (r *reporter) format(elapsed time.Duration) string {
	all := r.before + r.total
	doneAll := r.before + r.done
	var b strings.Builder
	pct := 100.0
	if all > 0 {
		pct = 100 * float64(doneAll) / float64(all)
	}
	fmt.Fprintf(&b, "batch %d/%d (%.1f%%)", doneAll, all, pct)
	if r.before > 0 {
		fmt.Fprintf(&b, ", %d from before", r.before)
	}
	if r.failed > 0 {
		fmt.Fprintf(&b, ", %d failed", r.failed)
	}
	sec := elapsed.Seconds()
	fmt.Fprintf(&b, ", %.1f tok/s, %s elapsed", float64(r.tokens)/max(sec, 1e-9), elapsed.Round(time.Second))
	if left := r.total - r.done; left > 0 && r.done > 0 {
		eta := time.Duration(float64(left) / float64(r.done) * float64(elapsed))
		fmt.Fprintf(&b, ", eta %s", eta.Round(time.Second))
	}
	if r.detail != nil {
		if d := r.detail(); d != "" {
			fmt.Fprintf(&b, "; %s", d)
		}
	}
	return b.String()
}
