//go:build unix

package prefix

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash tests run a store in a child process (this test binary, run
// again with K3_PREFIX_CHILD set) and kill it with SIGKILL: only a real
// process death shows what a directory holds when nothing in the process
// gets to clean up.

const (
	crashSize  = 64 << 10 // payload of each child entry
	crashChunk = 4 << 10  // written in chunks, so a kill can land mid-payload
)

// childMain runs the child's part, configured from the environment:
//
//	K3_PREFIX_CHILD=kill   Put entries 0…; at entry KILL_AT, die at STAGE
//	                       (payload: halfway through it; header: before
//	                       the header is written; rename: after the fsync,
//	                       before the rename; block: halfway, then wait to
//	                       be killed from outside, after creating READY)
//	K3_PREFIX_CHILD=writer Put entries 0…N−1 (sizes vary), re-Put some,
//	                       read some back, then exit 0
func childMain() int {
	env := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	dir := os.Getenv("K3_PREFIX_DIR")
	s, err := Open(Options{Fingerprint: testFP, BlockSize: testB, RAMBytes: int64(env("K3_PREFIX_RAM")),
		Dir: dir, DiskBytes: int64(env("K3_PREFIX_DISK"))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	x := s.Hasher()
	switch os.Getenv(childEnv) {
	case "kill":
		killAt, stage := env("K3_PREFIX_KILL_AT"), os.Getenv("K3_PREFIX_STAGE")
		persistChunk = crashChunk // so the write-behind, too, can die mid-payload
		entry := 0
		s.testHook = func(st string, n int64) error {
			if entry == killAt && st == stage && (st != "payload" || n >= crashSize/2) {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				waitForKill()
			}
			return nil
		}
		for ; ; entry++ {
			k, m := testKey(x, entry, 5, crashSize)
			data := content(k, crashSize)
			_, err := s.Put(k, m, func(w io.Writer) error {
				for off := 0; off < len(data); off += crashChunk {
					if stage == "block" && entry == killAt && off == crashSize/2 {
						os.WriteFile(os.Getenv("K3_PREFIX_READY"), nil, 0o644)
						waitForKill() // killed from outside, mid-payload
					}
					if _, err := w.Write(data[off : off+crashChunk]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			s.Flush() // with a RAM tier, the file is written by the write-behind
			if entry > killAt {
				fmt.Fprintln(os.Stderr, "the child was not killed")
				return 1
			}
		}
	case "writer":
		n := env("K3_PREFIX_N")
		for i := range n {
			k, m := testKey(x, i, 5, int64(1000+(i%7)*20000))
			putOrDie(s, k, m)
			if i%3 == 0 {
				// An earlier key again: present (cheap), or evicted by
				// either process and written anew while the parent may
				// be reading it.
				k, m = testKey(x, i/3, 5, int64(1000+((i/3)%7)*20000))
				putOrDie(s, k, m)
			}
		}
		s.Close()
		return 0
	}
	return 2
}

func putOrDie(s *Store, k Key, m Meta) {
	data := content(k, m.Size)
	if _, err := s.Put(k, m, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func childCmd(t *testing.T, mode, dir string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + mode, "K3_PREFIX_DIR=" + dir}, env...)...)
	return cmd
}

// killedBySignal reports whether cmd (waited for) died of SIGKILL.
func killedBySignal(cmd *exec.Cmd) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestKillDuringWrite: a writer killed at every stage of a write leaves
// the entries it finished intact and nothing of the one it was writing
// that a later store restores; its temporary file is removed as stale.
func TestKillDuringWrite(t *testing.T) {
	const killAt = 2
	for _, stage := range []string{"payload", "header", "rename", "block"} {
		for _, ram := range []int{0, 1 << 20} { // direct write, write-behind
			if stage == "block" && ram > 0 {
				continue // the payload would be going into RAM: no file yet
			}
			t.Run(fmt.Sprintf("%s/ram=%d", stage, ram), func(t *testing.T) {
				dir := t.TempDir()
				ready := filepath.Join(t.TempDir(), "ready")
				var stderr bytes.Buffer
				cmd := childCmd(t, "kill", dir, "K3_PREFIX_STAGE="+stage, fmt.Sprintf("K3_PREFIX_KILL_AT=%d", killAt),
					"K3_PREFIX_READY="+ready, fmt.Sprintf("K3_PREFIX_RAM=%d", ram), fmt.Sprintf("K3_PREFIX_DISK=%d", 64<<20))
				cmd.Stderr = &stderr
				if stage == "block" {
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					exited := make(chan error, 1)
					go func() { exited <- cmd.Wait() }()
					for { // wait for the child to be mid-payload (not a timing assertion)
						if _, err := os.Stat(ready); err == nil {
							break
						}
						select {
						case err := <-exited:
							t.Fatalf("child exited before the kill: %v: %s", err, stderr.String())
						case <-time.After(time.Millisecond):
						}
					}
					cmd.Process.Signal(syscall.SIGKILL)
					<-exited
				} else {
					cmd.Run()
				}
				if !killedBySignal(cmd) {
					t.Fatalf("child not killed: %v: %s", cmd.ProcessState, stderr.String())
				}

				s := openStore(t, withDir(dir))
				x := s.Hasher()
				for i := range killAt {
					k, _ := testKey(x, i, 5, crashSize)
					mustRead(t, s, k)
				}
				k, _ := testKey(x, killAt, 5, crashSize)
				if s.Has(k) {
					t.Fatal("the entry being written when the writer died is indexed")
				}
				if _, err := s.Get(k); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Get of the torn entry: %v", err)
				}
				if left := tempFiles(t, s.Dir()); len(left) != 0 {
					t.Fatalf("temporary files left: %v", left)
				}
				if st := s.Stats(); st.StaleTemps != 1 || st.BadEntries != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

// TestLiveTempNotCleaned: a store opening a directory does not remove the
// temporary file of a writer that is alive (it holds the lock).
func TestLiveTempNotCleaned(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, withDir(dir), withRAM(0))
	k, m := testKey(s.Hasher(), 1, 5, 2*crashChunk)
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := s.Put(k, m, func(w io.Writer) error {
			data := content(k, m.Size)
			w.Write(data[:crashChunk])
			close(entered)
			<-release
			_, err := w.Write(data[crashChunk:])
			return err
		})
		done <- err
	}()
	<-entered
	s2 := openStore(t, withDir(dir))
	if st := s2.Stats(); st.StaleTemps != 0 || len(tempFiles(t, s.Dir())) != 1 {
		t.Fatalf("a live writer's temporary file was cleaned: %+v", st)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustRead(t, s2, k) // found by Get although s2 did not index it
}

// TestTwoStoresGoroutines: two stores on one directory, each with writers
// and readers, under a disk bound that makes both evict: every read that
// succeeds returns the right bytes, and none finds a torn entry.
func TestTwoStoresGoroutines(t *testing.T) {
	dir := t.TempDir()
	stores := []*Store{
		openStore(t, withDir(dir), withRAM(200<<10), withDisk(600<<10)),
		openStore(t, withDir(dir), withRAM(0), withDisk(600<<10)),
	}
	x := stores[0].Hasher()
	const keys, rounds = 40, 150
	var wg sync.WaitGroup
	var mu sync.Mutex
	var hits, corrupt int
	// Readers start once something was written: on a loaded machine they
	// could otherwise all run before any writer and prove nothing.
	written := make(chan struct{})
	var once sync.Once
	for si, s := range stores {
		for g := range 2 {
			wg.Go(func() { // writer
				defer once.Do(func() { close(written) }) // even if every Put failed
				for i := range rounds {
					j := (i*7 + g*13 + si*5) % keys
					k, m := testKey(x, j, 5, int64(1000+j*1000))
					data := content(k, m.Size)
					if _, err := s.Put(k, m, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
						t.Errorf("Put: %v", err)
					}
					once.Do(func() { close(written) })
				}
			})
			wg.Go(func() { // reader
				<-written
				for i := range rounds {
					j := (i*11 + g*3 + si) % keys
					k, m := testKey(x, j, 5, int64(1000+j*1000))
					if i%10 == 0 {
						s.Lookup(x.Prompt([]int{j, j, j, j, j, j}), 6)
					}
					got, _, err := readAll(s, k)
					mu.Lock()
					switch {
					case err == nil:
						hits++
						if !bytes.Equal(got, content(k, m.Size)) {
							t.Errorf("key %d: wrong bytes", j)
						}
					case errors.Is(err, ErrCorrupt):
						corrupt++
						t.Errorf("key %d: %v", j, err)
					case !errors.Is(err, ErrNotFound):
						t.Errorf("key %d: %v", j, err)
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, s := range stores {
		s.Flush()
		if st := s.Stats(); st.BadEntries != 0 {
			t.Errorf("bad entries %+v", st)
		}
	}
	// And once everything is quiet, every key either reads back right or
	// is gone.
	for _, s := range stores {
		for j := range keys {
			k, m := testKey(x, j, 5, int64(1000+j*1000))
			got, _, err := readAll(s, k)
			switch {
			case err == nil:
				hits++
				if !bytes.Equal(got, content(k, m.Size)) {
					t.Errorf("quiet: key %d: wrong bytes", j)
				}
			case !errors.Is(err, ErrNotFound):
				t.Errorf("quiet: key %d: %v", j, err)
			}
		}
	}
	if hits == 0 {
		t.Error("no read succeeded: the test proves nothing")
	}
	t.Logf("%d verified reads", hits)
}

// TestTwoProcesses: a child process writes (and rewrites) entries while
// this one reads them through its own store: every read that succeeds is
// whole and right.
func TestTwoProcesses(t *testing.T) {
	dir := t.TempDir()
	const n = 120
	var stderr bytes.Buffer
	cmd := childCmd(t, "writer", dir, fmt.Sprintf("K3_PREFIX_N=%d", n), fmt.Sprintf("K3_PREFIX_DISK=%d", 2<<20))
	cmd.Stderr = &stderr
	s := openStore(t, withDir(dir), withRAM(0), withDisk(2<<20))
	x := s.Hasher()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	hits := 0
	check := func(i int) {
		k, m := testKey(x, i, 5, int64(1000+(i%7)*20000))
		got, _, err := readAll(s, k)
		switch {
		case err == nil:
			hits++
			if !bytes.Equal(got, content(k, m.Size)) {
				t.Fatalf("entry %d: wrong bytes", i)
			}
		case !errors.Is(err, ErrNotFound):
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	for running, i := true, 0; running; i++ {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("writer: %v: %s", err, stderr.String())
			}
			running = false
		default:
		}
		check(i % n)
		if i%5 == 0 {
			s.Lookup(x.Prompt([]int{i % n, i % n, i % n, i % n, i % n}), 5)
		}
	}
	for i := range n { // and once more after the writer is done
		check(i)
	}
	if hits == 0 {
		t.Fatal("no read succeeded: the test proves nothing")
	}
	if st := s.Stats(); st.BadEntries != 0 || st.DiskBytes > 2<<20 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d verified reads", hits)
}

// waitForKill blocks until the process is killed. It sleeps rather than
// selecting on nothing: with every other goroutine parked too (the store's
// write-behind waits on a condition variable), the runtime would call
// `select {}` a deadlock and exit 2 before the kill arrives.
func waitForKill() {
	for {
		time.Sleep(time.Hour)
	}
}
