package iox_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/k3go/k3/iox"
)

func TestFreeSpace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	ds, err := iox.FreeSpace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if ds.Free <= 0 || ds.Total < ds.Free || ds.FSType == "" {
		t.Fatalf("%+v", ds)
	}
	t.Logf("%s: %s, %.1f GB free of %.1f GB", t.TempDir(), ds.FSType, float64(ds.Free)/1e9, float64(ds.Total)/1e9)
	if _, err := iox.FreeSpace(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("FreeSpace of a missing directory succeeded")
	}
}

func TestMemoryInfo(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	m, err := iox.MemoryInfo()
	if err != nil {
		t.Fatal(err)
	}
	if m.Total <= 0 || m.Available <= 0 || m.Available > m.Total || m.Limit() <= 0 || m.Headroom() <= 0 {
		t.Fatalf("%+v", m)
	}
	t.Logf("%+v; limit %.2f GB, headroom %.2f GB", m, float64(m.Limit())/1e9, float64(m.Headroom())/1e9)
}

func writeTree(t *testing.T, files map[string]string) string {
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n"

func TestMemInfoCgroups(t *testing.T) {
	for _, c := range []struct {
		name              string
		files             map[string]string
		version           int
		limit, usage      int64
		wantLim, wantHead int64
	}{
		{"v2 nested", map[string]string{
			"proc/meminfo":                          meminfo,
			"proc/self/cgroup":                      "0::/user.slice/k3.scope\n",
			"cg/cgroup.controllers":                 "memory",
			"cg/user.slice/memory.max":              "8589934592\n",
			"cg/user.slice/k3.scope/memory.max":     "max\n",
			"cg/user.slice/k3.scope/memory.high":    "6442450944\n",
			"cg/user.slice/k3.scope/memory.current": "1073741824\n",
		}, 2, 6 << 30, 1 << 30, 6 << 30, 5 << 30},
		{"v2 unlimited", map[string]string{
			"proc/meminfo":          meminfo,
			"proc/self/cgroup":      "0::/\n",
			"cg/cgroup.controllers": "memory",
			"cg/memory.max":         "max\n",
		}, 2, 0, 0, 16000000 * 1024, 8000000 * 1024},
		{"v1 limited", map[string]string{
			"proc/meminfo":                           meminfo,
			"proc/self/cgroup":                       "4:memory:/job/42\n0::/\n",
			"cg/memory/memory.limit_in_bytes":        "9223372036854771712\n",
			"cg/memory/job/42/memory.limit_in_bytes": "4294967296\n",
			"cg/memory/job/42/memory.usage_in_bytes": "5368709120\n",
		}, 1, 4 << 30, 5 << 30, 4 << 30, 0},
		{"v1 unlimited", map[string]string{
			"proc/meminfo":                      meminfo,
			"proc/self/cgroup":                  "4:memory:/x\n",
			"cg/memory/x/memory.limit_in_bytes": "9223372036854771712\n",
		}, 1, 0, 0, 16000000 * 1024, 8000000 * 1024},
		{"no cgroup", map[string]string{"proc/meminfo": meminfo}, 0, 0, 0, 16000000 * 1024, 8000000 * 1024},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := writeTree(t, c.files)
			m, err := iox.ReadMemInfoFrom(filepath.Join(root, "proc"), filepath.Join(root, "cg"))
			if err != nil {
				t.Fatal(err)
			}
			if m.Total != 16000000*1024 || m.Available != 8000000*1024 || m.CgroupVersion != c.version ||
				m.CgroupLimit != c.limit || m.CgroupUsage != c.usage || m.Limit() != c.wantLim || m.Headroom() != c.wantHead {
				t.Fatalf("%+v limit %d headroom %d", m, m.Limit(), m.Headroom())
			}
		})
	}
	if _, err := iox.ReadMemInfoFrom(t.TempDir(), t.TempDir()); err == nil {
		t.Fatal("missing meminfo accepted")
	}
}
