package synth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/k3go/k3/iox"
)

// ErrNotEmpty reports an output directory that exists and is not empty, or
// is not a directory: the writer never overwrites anything.
var ErrNotEmpty = errors.New("output directory is not empty")

// ErrNoSpace reports a target file system without room for the checkpoint.
var ErrNoSpace = errors.New("not enough free space")

// Tokenizer files copied by WriteOptions.TokenizerDir.
var tokenizerFiles = []string{"tiktoken.model", "tokenizer_config.json"}

// WriteOptions configure Write. The zero value is valid.
type WriteOptions struct {
	// ShardSize is the target size of one safetensors file;
	// DefaultShardSize if zero.
	ShardSize int64
	// TokenizerDir, if set, names a directory whose tiktoken.model and
	// tokenizer_config.json are copied into the checkpoint.
	TokenizerDir string
	// GenerateTokenizer writes the generated tokenizer for the profile's
	// vocabulary (see GenerateTokenizer) into the checkpoint; so does
	// Profile.Tokenizer. It excludes TokenizerDir.
	GenerateTokenizer bool
	// Progress, if set, is called after each chunk with the bytes written
	// so far and the total. Calls never overlap and done never decreases;
	// they come from the writer's goroutines.
	Progress func(done, total int64)
	// Workers is the number of goroutines that generate and write chunks;
	// zero means GOMAXPROCS + 2 (at least 4), so that writes are in flight
	// while chunks are generated.
	Workers int
	// StopBias, if positive, biases the model head towards the stop tokens
	// (<|end_of_msg|> and [EOS]; it needs a tokenizer) by about StopBias
	// times the final hidden state's first component: replies on the
	// random weights end after a few tokens of noise, as end-to-end runs
	// of chat clients need (8 gives replies of 2 to 30 tokens).
	StopBias float64
	// CloseBias, if positive, biases the head towards the tokens that
	// close what is open (<|close|>, which ends the reasoning, a string
	// argument and every element of the format, and ", which ends a JSON
	// string; it needs a tokenizer) the same way, along another hidden
	// dimension: random weights then close their reasoning and their
	// strings within a few tokens, so a constrained answer (a forced tool
	// call, a response format) reaches its end, as end-to-end runs of a
	// contract suite need.
	CloseBias float64
	// Buffered disables O_DIRECT. Without it the writer uses O_DIRECT where
	// the file system supports it (and falls back silently where it does
	// not), which keeps the page cache out of the way and the progress
	// honest.
	Buffered bool

	// Dependencies the tests replace, passed in with the options.
	chunk      int                                            // bytes per write; 0 = defaultChunk
	freeSpace  func(dir string) (int64, error)                // nil = statfs
	openDirect func(path string, sh *Shard) (*os.File, error) // nil = openDirect
}

const (
	defaultChunk = 8 << 20
	directAlign  = 4096
	// spaceMargin is kept free beyond the checkpoint's own size.
	spaceMargin = 64 << 20
)

// Summary describes a written checkpoint.
type Summary struct {
	Dir     string   `json:"dir"`
	Profile string   `json:"profile"`
	Seed    uint64   `json:"seed"`
	Layers  int      `json:"layers"`
	Experts int      `json:"experts"`
	Files   []string `json:"files"`
	Shards  int      `json:"shards"`
	// Bytes counts every file written.
	Bytes   int64 `json:"bytes"`
	Tensors int   `json:"tensors"`
	// ExpertBytes is the size of one routed expert's contiguous run.
	ExpertBytes int64         `json:"expert_bytes"`
	Elapsed     time.Duration `json:"-"`
	ElapsedS    float64       `json:"elapsed_s"`
	// MBps is Bytes / Elapsed in units of 10^6 bytes per second.
	MBps float64 `json:"mb_per_s"`
	// Direct reports whether the shards were written with O_DIRECT.
	Direct bool `json:"direct_io"`
}

// Write writes the checkpoint of profile p into dir, which must not exist
// or be an empty directory (it is created with its parents if needed).
// Every file is written under a temporary name, fsynced, and renamed (never
// replacing an existing file) once all of them are complete; config.json
// comes last, so a directory with a config.json holds a whole checkpoint.
// On any error or cancellation everything written is removed, including
// directories Write created.
func Write(ctx context.Context, dir string, p Profile, opts WriteOptions) (Summary, error) {
	start := time.Now()
	L, err := PlanLayout(p, opts.ShardSize)
	if err != nil {
		return Summary{}, err
	}
	var small []smallFile
	genTok := opts.GenerateTokenizer || p.Tokenizer
	if genTok && opts.TokenizerDir != "" {
		return Summary{}, fmt.Errorf("synth: a generated tokenizer and a tokenizer directory (%s) exclude each other", opts.TokenizerDir)
	}
	if genTok {
		model, config, err := GenerateTokenizer(p.Config.Vocab)
		if err != nil {
			return Summary{}, err
		}
		small = append(small, smallFile{tokenizerFiles[0], model}, smallFile{tokenizerFiles[1], config},
			smallFile{GenerationConfigFile, GenerationConfig(p.Config.Vocab)})
	}
	if opts.TokenizerDir != "" {
		for _, name := range tokenizerFiles {
			data, err := os.ReadFile(filepath.Join(opts.TokenizerDir, name))
			if err != nil {
				return Summary{}, fmt.Errorf("synth: tokenizer: %w", err)
			}
			small = append(small, smallFile{name, data})
		}
		// generation_config.json comes along when the directory has one.
		if data, err := os.ReadFile(filepath.Join(opts.TokenizerDir, GenerationConfigFile)); err == nil {
			small = append(small, smallFile{GenerationConfigFile, data})
		}
	}
	var model, config []byte
	for _, f := range small {
		switch f.name {
		case tokenizerFiles[0]:
			model = f.data
		case tokenizerFiles[1]:
			config = f.data
		}
	}
	if opts.StopBias > 0 {
		if config == nil {
			return Summary{}, fmt.Errorf("synth: a stop bias needs a tokenizer (its stop tokens)")
		}
		ids, err := stopTokenIDs(config, p.Config.Vocab)
		if err != nil {
			return Summary{}, err
		}
		L.biasStops(ids, opts.StopBias)
	}
	if opts.CloseBias > 0 {
		if config == nil || model == nil {
			return Summary{}, fmt.Errorf("synth: a close bias needs a tokenizer (its <|close|> and \" tokens)")
		}
		ids, err := closeTokenIDs(config, model, p.Config.Vocab)
		if err != nil {
			return Summary{}, err
		}
		L.biasCloses(ids, opts.CloseBias)
	}
	small = append(small, smallFile{IndexFile, L.indexJSON}, smallFile{ConfigFile, L.configJSON}) // config last
	total := L.FileBytes
	for _, f := range small[:len(small)-2] {
		total += int64(len(f.data))
	}

	w := &writer{dir: dir, layout: L, opts: opts, total: total}
	if w.created, w.unlock, err = prepareDir(dir); err != nil {
		return Summary{}, err
	}
	if w.unlock != nil {
		defer w.unlock()
	}
	ok := false
	defer func() {
		if !ok {
			w.cleanup()
		}
	}()
	free := opts.freeSpace
	if free == nil {
		free = freeBytes
	}
	if avail, err := free(dir); err == nil && avail >= 0 && avail < total+spaceMargin {
		return Summary{}, fmt.Errorf("synth: %w: %s has %s free, the checkpoint needs %s (plus a %s margin)",
			ErrNoSpace, dir, FormatBytes(avail), FormatBytes(total), FormatBytes(spaceMargin))
	}
	if err := w.writeShards(ctx); err != nil {
		return Summary{}, err
	}
	for _, f := range small {
		if err := w.writeSmall(f); err != nil {
			return Summary{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Summary{}, err
	}
	if err := w.publish(); err != nil {
		return Summary{}, err
	}
	ok = true
	el := time.Since(start)
	s := Summary{Dir: dir, Profile: p.Name, Seed: p.Seed, Layers: L.Config.Layers, Experts: L.Config.Experts,
		Shards: len(L.Shards), Bytes: total, Tensors: L.Tensors, ExpertBytes: L.ExpertBytes,
		Elapsed: el, ElapsedS: el.Seconds(), MBps: float64(total) / el.Seconds() / 1e6, Direct: w.direct}
	for _, t := range w.temps {
		s.Files = append(s.Files, t.final)
	}
	return s, nil
}

type smallFile struct {
	name string
	data []byte
}

// tempFile is a file being written under a temporary name.
type tempFile struct {
	tmp, final string // base names inside dir
	published  bool
}

type writer struct {
	dir     string
	layout  *Layout
	opts    WriteOptions
	created []string // directories created, deepest first
	unlock  func()   // releases the lock on dir (nil where locks are unsupported)
	temps   []tempFile
	direct  bool

	total    int64
	done     atomic.Int64
	progress sync.Mutex
}

func tempName(final string) string { return "." + final + ".partial" }

// prepareDir checks that dir is absent or an empty directory and creates
// it if absent, returning the directories it created (deepest first) and
// the release of the lock it takes on dir for the write (iox.LockDir). A
// directory holding only temporary files of ours whose writer is gone (a
// killed k3 synth: its lock went with it) counts as empty: they are
// removed.
func prepareDir(dir string) (created []string, unlock func(), err error) {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return nil, nil, fmt.Errorf("synth: %w: %s exists and is not a directory", ErrNotEmpty, dir)
	case err == nil:
		if unlock, err = lockDir(dir); err != nil {
			return nil, nil, err
		}
		if err := removeStale(dir, unlock != nil); err != nil {
			if unlock != nil {
				unlock()
			}
			return nil, nil, err
		}
		return nil, unlock, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("synth: %w", err)
	}
	for d := filepath.Clean(dir); ; {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		removeDirs(created)
		return nil, nil, fmt.Errorf("synth: %w", err)
	}
	if unlock, err = lockDir(dir); err != nil {
		removeDirs(created)
		return nil, nil, err
	}
	return created, unlock, nil
}

// lockDir locks dir for the write; nil where locks are unsupported.
func lockDir(dir string) (func(), error) {
	unlock, err := iox.LockDir(dir)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, nil
	case errors.Is(err, iox.ErrLocked):
		return nil, fmt.Errorf("synth: %w: another k3 synth is writing into %s", ErrNotEmpty, dir)
	case err != nil:
		return nil, fmt.Errorf("synth: %w", err)
	}
	return unlock, nil
}

// removeStale fails unless dir is empty or holds only our temporary files
// (and locked says their writer is gone), which it removes.
func removeStale(dir string, locked bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	for _, e := range ents {
		if !locked || !isTempName(e.Name()) || !e.Type().IsRegular() {
			return fmt.Errorf("synth: %w: %s holds %d entries (for example %s); refusing to write into it",
				ErrNotEmpty, dir, len(ents), e.Name())
		}
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("synth: removing the stale %s: %w", e.Name(), err)
		}
	}
	return nil
}

// isTempName reports whether name is one tempName makes.
func isTempName(name string) bool {
	return len(name) > len(".x.partial") && strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".partial")
}

func removeDirs(dirs []string) {
	for _, d := range dirs {
		os.Remove(d) // only succeeds if empty
	}
}

// cleanup removes every file this writer created, then the directories.
func (w *writer) cleanup() {
	for _, t := range w.temps {
		os.Remove(filepath.Join(w.dir, t.tmp))
		if t.published {
			os.Remove(filepath.Join(w.dir, t.final))
		}
	}
	removeDirs(w.created)
}

// create opens a new temporary file for final; it fails if the name exists.
func (w *writer) create(final string) (*os.File, error) {
	tmp := tempName(final)
	f, err := os.OpenFile(filepath.Join(w.dir, tmp), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	w.temps = append(w.temps, tempFile{tmp: tmp, final: final})
	return f, nil
}

// shardFile is an open shard being written.
type shardFile struct {
	sh *Shard
	f  *os.File
}

// job is one chunk of one shard: file bytes [off, off+n).
type job struct {
	file int
	off  int64
	n    int
}

func (w *writer) writeShards(ctx context.Context) error {
	L := w.layout
	files := make([]shardFile, len(L.Shards))
	defer func() {
		for _, sf := range files {
			if sf.f != nil {
				sf.f.Close()
			}
		}
	}()
	for i := range L.Shards {
		f, err := w.create(L.Shards[i].Name)
		if err != nil {
			return err
		}
		files[i] = shardFile{sh: &L.Shards[i], f: f}
	}
	// O_DIRECT where the file system takes it: reopen every shard with
	// the flag; if one refuses, keep the buffered handles for all.
	if !w.opts.Buffered && oDirect != 0 {
		open := w.opts.openDirect
		if open == nil {
			open = openDirect
		}
		direct := make([]*os.File, 0, len(files))
		for _, sf := range files {
			d, err := open(sf.f.Name(), sf.sh)
			if err != nil {
				break
			}
			direct = append(direct, d)
		}
		if len(direct) == len(files) {
			for i := range files {
				files[i].f.Close()
				files[i].f = direct[i]
			}
			w.direct = true
		} else {
			for _, d := range direct {
				d.Close()
			}
		}
	}

	chunk := w.opts.chunk
	if chunk <= 0 {
		chunk = defaultChunk
	}
	chunk = (chunk + directAlign - 1) &^ (directAlign - 1)
	var jobs []job
	for i, sf := range files {
		for off := int64(0); off < sf.sh.Size; off += int64(chunk) {
			jobs = append(jobs, job{file: i, off: off, n: int(min(int64(chunk), sf.sh.Size-off))})
		}
	}
	workers := w.opts.Workers
	if workers <= 0 {
		workers = max(4, runtime.GOMAXPROCS(0)+2)
	}
	workers = min(workers, len(jobs))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := alignedBuffer(chunk)
			for {
				if ctx.Err() != nil {
					return
				}
				k := int(next.Add(1) - 1)
				if k >= len(jobs) {
					return
				}
				j := jobs[k]
				sf := files[j.file]
				sf.sh.fill(j.off, buf[:j.n])
				n := j.n
				if w.direct && n%directAlign != 0 {
					n = (n + directAlign - 1) &^ (directAlign - 1)
					clear(buf[j.n:n])
				}
				if _, err := sf.f.WriteAt(buf[:n], j.off); err != nil {
					fail(fmt.Errorf("synth: writing %s at offset %d: %w", sf.sh.Name, j.off, err))
					return
				}
				w.advance(int64(j.n))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range files {
		sf := &files[i]
		if w.direct {
			if err := sf.f.Truncate(sf.sh.Size); err != nil { // drop the padding of the last block
				return fmt.Errorf("synth: %s: %w", sf.sh.Name, err)
			}
		}
		if err := sf.f.Sync(); err != nil {
			return fmt.Errorf("synth: syncing %s: %w", sf.sh.Name, err)
		}
		err := sf.f.Close()
		sf.f = nil
		if err != nil {
			return fmt.Errorf("synth: closing %s: %w", sf.sh.Name, err)
		}
	}
	return nil
}

// openDirect opens a freshly created temporary file with O_DIRECT and
// probes it with one aligned write of the shard's first block (some file
// systems accept the flag at open and refuse the writes).
func openDirect(path string, sh *Shard) (*os.File, error) {
	d, err := os.OpenFile(path, os.O_WRONLY|oDirect, 0)
	if err != nil {
		return nil, err
	}
	probe := alignedBuffer(directAlign)
	copy(probe, sh.header)
	if _, err := d.WriteAt(probe, 0); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// alignedBuffer returns n bytes starting on a directAlign boundary.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (directAlign - 1))
	if off != 0 {
		off = directAlign - off
	}
	return b[off : off+n : off+n]
}

func (w *writer) advance(n int64) {
	w.progress.Lock()
	d := w.done.Add(n)
	if w.opts.Progress != nil {
		w.opts.Progress(d, w.total)
	}
	w.progress.Unlock()
}

// fill writes file bytes [off, off+len(dst)) of the shard.
func (sh *Shard) fill(off int64, dst []byte) {
	end := off + int64(len(dst))
	if off < sh.DataOff {
		copy(dst, sh.header[off:])
	}
	ts := sh.Tensors
	i := sort.Search(len(ts), func(i int) bool { return ts[i].Offset+ts[i].Size > off })
	for ; i < len(ts) && ts[i].Offset < end; i++ {
		t := &ts[i]
		a, b := max(off, t.Offset), min(end, t.Offset+t.Size)
		fillTensor(t.gen, a-t.Offset, dst[a-off:b-off])
	}
}

func (w *writer) writeSmall(sf smallFile) error {
	f, err := w.create(sf.name)
	if err != nil {
		return err
	}
	_, err = f.Write(sf.data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("synth: writing %s: %w", sf.name, err)
	}
	w.advance(int64(len(sf.data)))
	return nil
}

// publish gives every temporary file its final name, in the order written
// (config.json last), never replacing an existing file, then syncs the
// directory.
func (w *writer) publish() error {
	for i := range w.temps {
		t := &w.temps[i]
		tmp, final := filepath.Join(w.dir, t.tmp), filepath.Join(w.dir, t.final)
		if err := os.Link(tmp, final); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("synth: %w: %s appeared while writing", ErrNotEmpty, final)
			}
			// No hard links here: rename, after checking the name is free.
			if _, serr := os.Lstat(final); serr == nil {
				return fmt.Errorf("synth: %w: %s appeared while writing", ErrNotEmpty, final)
			}
			if err := os.Rename(tmp, final); err != nil {
				return fmt.Errorf("synth: %w", err)
			}
			t.published = true
			continue
		}
		t.published = true
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	if err := iox.SyncDir(w.dir); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// FormatBytes prints a byte count with a binary unit ("10.4 GiB").
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
