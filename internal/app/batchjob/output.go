package batchjob

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/k3go/k3/iox"
)

// outputLine is the shape of one output line.
type outputLine struct {
	ID       string     `json:"id"`
	CustomID *string    `json:"custom_id"`
	Response *response  `json:"response"`
	Error    *lineError `json:"error"`
}

// response is the "response" object of an output line.
type response struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// journal is the output file: read once to find what is done, then
// appended to, one whole line per write.
type journal struct {
	f         *os.File
	unlock    func()
	syncEvery time.Duration
	lastSync  time.Time
	dirty     bool
	write     lineWriter // nil: f.Write
}

// openJournal opens (or creates) the output, locks it against a second
// job, drops a torn last line and returns the keys of the results it holds.
func openJournal(path string, syncEvery time.Duration, write lineWriter) (j *journal, done map[string]struct{}, truncated int64, err error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("output: %w", err)
	}
	if os.IsNotExist(statErr) {
		iox.SyncDir(filepath.Dir(path)) // best effort: the new name survives a machine crash
	}
	unlock, err := lockFile(f)
	if err != nil {
		f.Close()
		return nil, nil, 0, fmt.Errorf("output %s: %w: another job holds it (%v)", path, ErrBadOutput, err)
	}
	j = &journal{f: f, unlock: unlock, syncEvery: syncEvery, lastSync: time.Now(), write: write}
	done, end, err := scanJournal(f)
	if err != nil {
		j.close()
		return nil, nil, 0, fmt.Errorf("output %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		j.close()
		return nil, nil, 0, fmt.Errorf("output: %w", err)
	}
	if st.Size() > end {
		// A torn last line (the process died inside a write): cut it off,
		// durably, before appending after it.
		if err := f.Truncate(end); err != nil {
			j.close()
			return nil, nil, 0, fmt.Errorf("output %s: dropping a torn last line: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			j.close()
			return nil, nil, 0, fmt.Errorf("output %s: %w", path, err)
		}
		truncated = st.Size() - end
	}
	return j, done, truncated, nil
}

// scanJournal reads every complete line of f and returns the keys of the
// results it holds and the offset just past the last complete line.
func scanJournal(f *os.File) (map[string]struct{}, int64, error) {
	done := make(map[string]struct{})
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 64<<10)
	var end int64
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return done, end, nil // a partial line, if any, is torn
		}
		if err != nil {
			return nil, 0, err
		}
		var l outputLine
		if json.Unmarshal(b, &l) != nil || l.ID == "" {
			return nil, 0, fmt.Errorf("%w: line %d is not a batch result line; use a new output file", ErrBadOutput, n)
		}
		if l.CustomID != nil && *l.CustomID != "" {
			done["c:"+*l.CustomID] = struct{}{}
		} else {
			done["i:"+l.ID] = struct{}{}
		}
		end += int64(len(b))
	}
}

// append writes one line (ending in a newline) with one write call, and
// syncs the file if the last sync is older than syncEvery.
func (j *journal) append(line []byte) error {
	if j.write != nil && j.write(j.f, line) {
		return nil
	}
	if _, err := j.f.Write(line); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	j.dirty = true
	if time.Since(j.lastSync) >= j.syncEvery {
		return j.sync()
	}
	return nil
}

func (j *journal) sync() error {
	if !j.dirty {
		return nil
	}
	j.dirty, j.lastSync = false, time.Now()
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// close syncs, unlocks and closes the file.
func (j *journal) close() error {
	err := j.sync()
	j.unlock()
	if cerr := j.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("output: %w", cerr)
	}
	return err
}

// lineWriter, when set (Options.writeLine: the crash tests tear a line
// with it), is called instead of the write of each line; it returns true
// when it has handled the line.
type lineWriter func(f *os.File, line []byte) bool

// encodeLine renders an output line, newline included. It does not escape
// HTML characters, so response bodies keep their bytes.
func encodeLine(l *outputLine) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
