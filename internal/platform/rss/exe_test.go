package rss

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestExecutableBytes checks the bound against the pages the test binary
// really has resident from its own file (Linux: /proc/self/smaps), and
// that it is not absurd against the file.
func TestExecutableBytes(t *testing.T) {
	n := ExecutableBytes()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 || n > st.Size()+bssCounted+1<<30 {
		t.Fatalf("ExecutableBytes = %d for a %d-byte executable", n, st.Size())
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	defer f.Close()
	var resident int64
	mine := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			mine = len(fields) >= 6 && fields[5] == exe
		case mine && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			resident += kb << 10
		}
	}
	if resident == 0 {
		t.Fatalf("no resident pages of %s found in /proc/self/smaps", exe)
	}
	t.Logf("ExecutableBytes %d; resident from the file %d", n, resident)
	if resident > n {
		t.Fatalf("%d bytes of the executable are resident, more than ExecutableBytes %d", resident, n)
	}
}
