package sysinfo_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/k3go/k3/internal/platform/sysinfo"
)

// sysinfoOS lists the systems whose memory and storage FreeSpace and
// MemoryInfo read.
var sysinfoOS = map[string]bool{"linux": true, "darwin": true, "freebsd": true, "windows": true}

func TestFreeSpace(t *testing.T) {
	if !sysinfoOS[runtime.GOOS] {
		t.Skip("not implemented on " + runtime.GOOS)
	}
	ds, err := sysinfo.FreeSpace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if ds.Free <= 0 || ds.Total < ds.Free || ds.FSType == "" {
		t.Fatalf("%+v", ds)
	}
	t.Logf("%s: %s, %.1f GB free of %.1f GB", t.TempDir(), ds.FSType, float64(ds.Free)/1e9, float64(ds.Total)/1e9)
	if _, err := sysinfo.FreeSpace(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("FreeSpace of a missing directory succeeded")
	}
}

func TestMemoryInfo(t *testing.T) {
	if !sysinfoOS[runtime.GOOS] {
		t.Skip("not implemented on " + runtime.GOOS)
	}
	m, err := sysinfo.MemoryInfo()
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
			m, err := sysinfo.ReadMemInfoFrom(filepath.Join(root, "proc"), filepath.Join(root, "cg"))
			if err != nil {
				t.Fatal(err)
			}
			if m.Total != 16000000*1024 || m.Available != 8000000*1024 || m.CgroupVersion != c.version ||
				m.CgroupLimit != c.limit || m.CgroupUsage != c.usage || m.Limit() != c.wantLim || m.Headroom() != c.wantHead {
				t.Fatalf("%+v limit %d headroom %d", m, m.Limit(), m.Headroom())
			}
		})
	}
	if _, err := sysinfo.ReadMemInfoFrom(t.TempDir(), t.TempDir()); err == nil {
		t.Fatal("missing meminfo accepted")
	}
}

// TestSysctlMem reads macOS's and FreeBSD's memory figures from fake sysctl
// trees: the page size the counts are in, the optional counts, the cap at
// the physical memory, and the errors.
func TestSysctlMem(t *testing.T) {
	const gib = 1 << 30
	mac := map[string]uint64{ // Apple silicon: 16 KiB pages
		"hw.memsize": 64 * gib, "vm.pagesize": 16384, "hw.pagesize": 4096,
		"vm.page_free_count": 100_000, "vm.page_speculative_count": 20_000,
		"vm.page_purgeable_count": 5_000, "vm.page_pageable_external_count": 300_000,
		"vm.page_pageable_internal_count": 2_000_000, // anonymous: not available
	}
	bsd := map[string]uint64{ // FreeBSD 14: no v_cache_count
		"hw.physmem": 32 * gib, "vm.stats.vm.v_page_size": 4096,
		"vm.stats.vm.v_free_count": 1_000_000, "vm.stats.vm.v_inactive_count": 500_000, "vm.stats.vm.v_laundry_count": 99_999,
	}
	getter := func(tree map[string]uint64, drop ...string) func(string) (uint64, error) {
		return func(name string) (uint64, error) {
			v, ok := tree[name]
			if !ok || slices.Contains(drop, name) {
				return 0, errors.New("no such sysctl")
			}
			return v, nil
		}
	}
	for _, c := range []struct {
		name         string
		goos         string
		get          func(string) (uint64, error)
		total, avail int64
		err          bool
	}{
		{"darwin", "darwin", getter(mac), 64 * gib, 425_000 * 16384, false},
		{"darwin without vm.pagesize", "darwin", getter(mac, "vm.pagesize"), 64 * gib, 425_000 * 4096, false},
		{"darwin, only free pages", "darwin", getter(mac, "vm.page_speculative_count", "vm.page_purgeable_count", "vm.page_pageable_external_count"), 64 * gib, 100_000 * 16384, false},
		{"darwin without free pages", "darwin", getter(mac, "vm.page_free_count"), 0, 0, true},
		{"darwin without memsize", "darwin", getter(mac, "hw.memsize"), 0, 0, true},
		{"darwin without a page size", "darwin", getter(mac, "vm.pagesize", "hw.pagesize"), 0, 0, true},
		{"freebsd", "freebsd", getter(bsd), 32 * gib, 1_500_000 * 4096, false},
		{"freebsd 11 with v_cache_count", "freebsd", getter(mergeMaps(bsd, map[string]uint64{"vm.stats.vm.v_cache_count": 10})), 32 * gib, 1_500_010 * 4096, false},
		{"more available than physical", "freebsd", getter(mergeMaps(bsd, map[string]uint64{"vm.stats.vm.v_free_count": 1 << 40})), 32 * gib, 32 * gib, false},
	} {
		m, err := sysinfo.ReadSysctlMem(c.goos, c.get)
		if c.err {
			if err == nil {
				t.Errorf("%s: no error, %+v", c.name, m)
			}
			continue
		}
		if err != nil || m.Total != c.total || m.Available != c.avail || m.Limit() != c.total || m.Headroom() != c.avail {
			t.Errorf("%s: %+v, %v; want total %d, available %d", c.name, m, err, c.total, c.avail)
		}
	}
}

func mergeMaps(a, b map[string]uint64) map[string]uint64 {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}
