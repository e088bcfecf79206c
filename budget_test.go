package k3_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/engine/planner"
	"github.com/k3go/k3/internal/platform/rss"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// wideProfile is a synthetic checkpoint of 8 layers × 64 experts, wide
// enough (about 250 MB) that its weights are much larger than the smallest
// budget that runs it.
func wideProfile() synth.Profile {
	p := synth.Tiny()
	p.Name = "custom"
	p.SetLayers(8)
	c := &p.Config
	c.Hidden, c.Vocab = 1024, 4096
	c.KDAHeads, c.KDAHeadDim = 8, 64
	c.MLAHeads, c.QLoraRank, c.KVLoraRank = 8, 256, 128
	c.Experts, c.TopK, c.LatentDim, c.MoEIntermediate = 64, 8, 512, 512
	c.DenseIntermediate, c.AttnResBlock = 1024, 4
	return p
}

var (
	wideOnce sync.Once
	wideDir  string
	wideErr  error
)

// wideCheckpoint writes the wide synthetic checkpoint once per test binary.
func wideCheckpoint(t *testing.T) string {
	t.Helper()
	wideOnce.Do(func() {
		dir, err := os.MkdirTemp("", "k3-wide-")
		if err != nil {
			wideErr = err
			return
		}
		wideDir = dir + "/ckpt"
		_, wideErr = synth.Write(context.Background(), wideDir, wideProfile(), synth.WriteOptions{})
	})
	if wideErr != nil {
		t.Fatal(wideErr)
	}
	return wideDir
}

// removeWide runs the tests, then removes the wide checkpoint.
type removeWide struct{ m *testing.M }

func (r removeWide) Run() int {
	code := r.m.Run()
	if wideDir != "" {
		os.RemoveAll(wideDir + "/..")
	}
	if k3Bin != "" {
		os.RemoveAll(filepath.Dir(k3Bin))
	}
	return code
}

// rssChild runs in a fresh process: open with a budget, generate, report
// the peak RSS as JSON on stdout. (The subprocess tests below run the k3
// command instead; this child stays for tests that need the library
// alone.)
func rssChild(spec string) int {
	var dir string
	var budget int64
	if _, err := fmt.Sscanf(spec, "%s %d", &dir, &budget); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	m, err := k3.Open(dir, k3.Options{RAMBudget: budget, MaxContext: 64})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	prompt := []int{1, 2, 3, 4, 5, 6, 7, 8}
	for _, err := range m.Generate(context.Background(), prompt, k3.GenerateOptions{MaxTokens: 6}) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	st := m.Stats()
	json.NewEncoder(os.Stdout).Encode(map[string]int64{"peak": rss.Peak(), "planned": st.PlannedBytes, "read": st.BytesRead})
	m.Close()
	return 0
}

var (
	k3BinOnce sync.Once
	k3Bin     string
	k3BinErr  error
	// k3BuildTags are the build tags this test binary was built with
	// (buildtags_purego_test.go sets purego).
	k3BuildTags string
)

// k3Binary builds the k3 command once per test binary: the peak RSS of a
// process counts its own executable, so the budget is checked on the
// command users run.
func k3Binary(t *testing.T) string {
	t.Helper()
	k3BinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "k3-bin-")
		if err != nil {
			k3BinErr = err
			return
		}
		k3Bin = filepath.Join(dir, "k3")
		// The command is built with this test binary's tags: a worker
		// process built without purego would choose other kernels than
		// a rank 0 built with it, and refuse the cluster.
		out, err := exec.Command("go", "build", "-tags", k3BuildTags, "-o", k3Bin, "./cmd/k3").CombinedOutput()
		if err != nil {
			k3BinErr = fmt.Errorf("go build ./cmd/k3: %v\n%s", err, out)
		}
	})
	if k3BinErr != nil {
		t.Fatal(k3BinErr)
	}
	return k3Bin
}

// gnuTime is GNU time, whose -v report gives the maximum resident set of
// the command it runs; empty where it is missing.
var gnuTime = func() string {
	if _, err := os.Stat("/usr/bin/time"); err == nil {
		return "/usr/bin/time"
	}
	return ""
}()

// measured is one k3 command's run under a budget.
type measured struct {
	peak     int64 // maximum resident set, bytes
	how      string
	stdout   []byte
	stderr   string
	exitCode int
}

// runMeasured runs the k3 command under GNU time -v (or, where it is
// missing, reads the process's own VmHWM from the stats it prints: both
// are the kernel's peak RSS of the process) and returns its peak RSS.
func runMeasured(t *testing.T, args ...string) measured {
	t.Helper()
	bin := k3Binary(t)
	var cmd *exec.Cmd
	if gnuTime != "" {
		cmd = exec.Command(gnuTime, append([]string{"-v", bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	m := measured{stdout: stdout.Bytes(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		m.exitCode = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("k3 %v: %v", args, err)
	}
	if gnuTime != "" {
		const key = "Maximum resident set size (kbytes):"
		i := strings.Index(m.stderr, key)
		if i < 0 {
			t.Fatalf("k3 %v: no %q in GNU time's report:\n%s", args, key, m.stderr)
		}
		f := strings.Fields(m.stderr[i+len(key):])
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		m.peak, m.how = kb*1024, "/usr/bin/time -v"
	}
	return m
}

// statsOf returns the "stats" object of k3 generate --json --stats.
func statsOf(t *testing.T, m measured) (read, vmhwm, moves int64) {
	t.Helper()
	var out struct {
		Stats struct {
			BytesRead int64 `json:"bytes_read"`
			PeakRSS   int64 `json:"peak_rss_bytes"`
			Moves     int64 `json:"plan_moves"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(m.stdout, &out); err != nil {
		t.Fatalf("k3 generate output %q: %v\n%s", m.stdout, err, m.stderr)
	}
	return out.Stats.BytesRead, out.Stats.PeakRSS, out.Stats.Moves
}

// doctorFloor returns the floor k3 doctor reports for dir.
func doctorFloor(t *testing.T, dir string) int64 {
	t.Helper()
	m := runMeasured(t, "doctor", "--model", dir, "--dir", t.TempDir(), "--probe-size", "1MiB", "--json")
	var r struct {
		Floor int64 `json:"floor_bytes"`
	}
	if err := json.Unmarshal(m.stdout, &r); err != nil || r.Floor <= 0 {
		t.Fatalf("k3 doctor --json: %v, floor %d\n%s%s", err, r.Floor, m.stdout, m.stderr)
	}
	return r.Floor
}

// checkPeak runs k3 generate with a budget and checks that the process's
// peak RSS stayed within it, with no allowance, and that the run read at
// least minRead bytes (it really streamed). The prompt (300 tokens) is
// long enough that the engine moves to wider passes for it and back for
// decoding: both plans, and the moves between them, stay within the
// budget.
func checkPeak(t *testing.T, dir string, budget int64, threads int, minRead int64) (moves int64) {
	t.Helper()
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = strconv.Itoa(1 + i*7%1000)
	}
	m := runMeasured(t, "generate", "--model", dir, "--budget", strconv.FormatInt(budget, 10), "--threads", strconv.Itoa(threads),
		"--ids", strings.Join(ids, ","), "--max-tokens", "6", "--json", "--stats")
	if m.exitCode != 0 {
		t.Fatalf("budget %d, %d threads: exit %d\n%s", budget, threads, m.exitCode, m.stderr)
	}
	read, vmhwm, moves := statsOf(t, m)
	if m.how == "" {
		m.peak, m.how = vmhwm, "VmHWM (no /usr/bin/time)"
	}
	t.Logf("budget %s, %d threads: peak RSS %s (%s), read %s, %d moves between memory plans", human(budget), threads, human(m.peak), m.how, human(read), moves)
	if m.peak <= 0 || m.peak > budget {
		t.Errorf("budget %d, %d threads: peak RSS %d exceeds the budget", budget, threads, m.peak)
	}
	if read < minRead {
		t.Errorf("budget %d: only %d bytes read; the run did not stream", budget, read)
	}
	return moves
}

// TestPeakRSSWithinBudget runs the k3 command on a checkpoint several
// times larger than its budget, at the floor k3 doctor reports and at a
// budget a quarter of the way up, with 1 and 4 threads, and checks that
// the process's peak RSS (GNU time's maximum resident set) stays within
// the budget with no allowance while the run really streams; and that one
// byte less than the floor is refused with that same floor.
func TestPeakRSSWithinBudget(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("writes a 250 MB checkpoint and builds the k3 command")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory counts in the RSS")
	}
	dir := wideCheckpoint(t)
	in, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	total := in.Sizes.TrunkBuffers + in.Sizes.Experts*in.Sizes.ExpertBytes + in.Sizes.LMHead + in.Sizes.Embed
	floor := doctorFloor(t, dir)
	// One byte under doctor's floor is refused by every command with that
	// same floor.
	// k3 run needs a tokenizer, which the wide checkpoint has not (and says
	// so before anything else): it gets the checkpoint beside the
	// quickstart's tokenizer, whose tables count in the floor, and doctor's
	// floor for that.
	withTok := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(withTok, e.Name()))
	}
	for _, f := range []string{"tiktoken.model", "tokenizer_config.json"} {
		os.Symlink(filepath.Join(testmodel.Dir(t), f), filepath.Join(withTok, f))
	}
	runFloor := doctorFloor(t, withTok)
	under := strconv.FormatInt(floor-1, 10)
	for _, c := range []struct {
		args  []string
		floor int64
	}{
		{[]string{"generate", "--model", dir, "--budget", under, "--ids", "1,2,3"}, floor},
		{[]string{"bench", "--model", dir, "--budget", under, "--tokens", "1", "--probe-size", "0"}, floor},
		{[]string{"run", "--model", withTok, "--budget", strconv.FormatInt(runFloor-1, 10), "--prompt", "x"}, runFloor},
	} {
		m := runMeasured(t, c.args...)
		if m.exitCode != 5 || !strings.Contains(m.stderr, "the floor needs "+planner.Human(c.floor)) {
			t.Errorf("k3 %s one byte under doctor's floor %s: exit %d (want 5, ErrBudget) with the same floor:\n%s", c.args[0], planner.Human(c.floor), m.exitCode, m.stderr)
		}
	}
	var moves int64
	for _, budget := range []int64{floor, floor + (total-floor)/4} {
		if budget >= total {
			t.Fatalf("budget %d is not smaller than the checkpoint's weights %d", budget, total)
		}
		for _, threads := range []int{1, 4} {
			moves += checkPeak(t, dir, budget, threads, total/2)
		}
	}
	if moves == 0 {
		t.Error("no run moved to wider passes for its 300-token prompt: the moves between memory plans went unmeasured")
	}
}

// TestPeakRSSWithinBudgetMedium checks the medium checkpoint (the real
// widths, K3_MEDIUM=dir) at its floor with k3 generate, and at 4 GB with
// k3 bench, the command of the issue that measured 4.13 GB there.
func TestPeakRSSWithinBudgetMedium(t *testing.T) {
	dir := os.Getenv("K3_MEDIUM")
	if dir == "" || raceEnabled {
		t.Skip("set K3_MEDIUM to a medium checkpoint (k3 synth --profile medium)")
	}
	floor := doctorFloor(t, dir)
	checkPeak(t, dir, floor, 2, 1<<30)
	const budget = 4e9
	m := runMeasured(t, "bench", "--model", dir, "--budget", "4GB", "--tokens", "4", "--prompt-len", "4", "--probe-size", "256MiB", "--json")
	if m.exitCode != 0 {
		t.Fatalf("k3 bench: exit %d\n%s", m.exitCode, m.stderr)
	}
	var r struct {
		Peak int64 `json:"peak_rss_bytes"`
	}
	if err := json.Unmarshal(m.stdout, &r); err != nil {
		t.Fatal(err)
	}
	if m.how == "" {
		m.peak, m.how = r.Peak, "VmHWM (no /usr/bin/time)"
	}
	t.Logf("bench at 4 GB: peak RSS %s (%s)", human(m.peak), m.how)
	if m.peak <= 0 || m.peak > budget {
		t.Errorf("k3 bench at 4 GB: peak RSS %d exceeds the budget", m.peak)
	}
}

// TestBudgetInvarianceWide checks bit-identical logits across three
// budgets (the smallest accepted, a middle one, everything resident) and
// 1 and 4 threads on a synthetic checkpoint of 8 layers × 64 experts.
func TestBudgetInvarianceWide(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 250 MB checkpoint")
	}
	dir := wideCheckpoint(t)
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{5, 77, 1023, 4000, 12, 9, 300, 2048, 1, 0, 4095, 64}
	var ref []float32
	for _, budget := range []int64{in.FloorBytes, (in.FloorBytes + in.FullBytes) / 2, 0} {
		for _, threads := range []int{1, 4} {
			m, err := k3.Open(dir, k3.Options{RAMBudget: budget, Threads: threads, MaxContext: 64})
			if err != nil {
				t.Fatalf("budget %d: %v", budget, err)
			}
			got, err := m.NewSession().Logits(context.Background(), ids)
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			if ref == nil {
				ref = got
				continue
			}
			for i := range ref {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("budget %d threads %d: logit %d = %v, want %v", budget, threads, i, got[i], ref[i])
				}
			}
		}
	}
}

// TestSessionsWithinBudget checks that under a budget only Options.Sessions
// sessions hold state at once: one more fails with ErrBudget until one is
// closed; Model.Generate releases its session when it ends.
func TestSessionsWithinBudget(t *testing.T) {
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{RAMBudget: 60e6, MaxContext: 64, Sessions: 2})
	ctx := context.Background()
	a, b, c := m.NewSession(), m.NewSession(), m.NewSession()
	for _, s := range []*k3.Session{a, b} {
		if _, err := s.Step(ctx, exp.PromptIDs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Step(ctx, exp.PromptIDs); !errors.Is(err, k3.ErrBudget) {
		t.Fatalf("a third session under Sessions=2: %v, want ErrBudget", err)
	}
	a.Close()
	if _, err := c.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatalf("after closing one: %v", err)
	}
	b.Close()
	for i := 0; i < 3; i++ { // each Generate takes and returns a place
		for _, err := range m.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 2}) {
			if err != nil {
				t.Fatalf("Generate %d: %v", i, err)
			}
		}
	}
	// A closed session is empty and unusable; its place serves another.
	if a.Len() != 0 {
		t.Fatalf("closed session holds %d tokens", a.Len())
	}
	c.Close()
	if _, err := a.Step(ctx, exp.PromptIDs); !errors.Is(err, k3.ErrClosed) {
		t.Fatalf("stepping a closed session: %v, want ErrClosed", err)
	}
	d := m.NewSession()
	defer d.Close()
	if _, err := d.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatalf("a new session after closing the others: %v", err)
	}
}

func human(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// TestPlanCoversHeap opens the wide checkpoint at its floor, generates,
// and checks in the same process that the live Go heap fits the plan's
// heap share and that the runtime's memory stayed under the limit Open
// set: the estimates of the index, the tokenizer and the runtime are upper
// bounds.
func TestPlanCoversHeap(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("writes a 250 MB checkpoint")
	}
	dir := wideCheckpoint(t)
	in, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mp, err := in.Plan(in.FloorBytes)
	if err != nil {
		t.Fatal(err)
	}
	in = nil
	runtime.GC()
	m, err := k3.Open(dir, k3.Options{RAMBudget: mp.Budget})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, err := range m.Generate(context.Background(), []int{1, 2, 3, 4}, k3.GenerateOptions{MaxTokens: 4}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	goMem := int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("plan: heap %s, Go memory limit %s; live heap %s, Go's memory %s", human(mp.HeapBytes), human(mp.HeapLimitBytes), human(int64(ms.HeapAlloc)), human(goMem))
	if int64(ms.HeapAlloc) > mp.HeapBytes {
		t.Errorf("live heap %d exceeds the planned heap %d", ms.HeapAlloc, mp.HeapBytes)
	}
	if goMem > mp.HeapLimitBytes {
		t.Errorf("the Go runtime holds %d bytes, over the limit %d", goMem, mp.HeapLimitBytes)
	}
}
