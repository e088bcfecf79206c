package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/k3go/k3"
)

// presets are the named RAM budgets. "max" keeps everything resident.
var presets = []struct {
	name  string
	bytes int64
	note  string
}{
	{"laptop", 8e9, "8 GB: the floor plus a streaming trunk"},
	{"desktop", 32e9, "32 GB"},
	{"workstation", 64e9, "64 GB"},
	{"server", 128e9, "128 GB: most of the trunk pinned"},
	{"max", 0, "everything resident (no limit)"},
}

// parseSize reads a byte count: a number with an optional unit, B, KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); K, M, G,
// T alone mean the decimal units.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult := map[string]float64{"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("bad size unit in %q (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	if v*mult > 1<<62 {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return int64(v * mult), nil
}

// budgetFlags are --budget and --preset.
type budgetFlags struct {
	budget, preset string
}

func (b *budgetFlags) register(fs interface {
	StringVar(*string, string, string, string)
}) {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.name
	}
	fs.StringVar(&b.budget, "budget", "", "hard RAM `limit` for the engine, e.g. 8GB or 12GiB (default: no limit)")
	fs.StringVar(&b.preset, "preset", "", "named budget: "+strings.Join(names, ", "))
}

func (b *budgetFlags) bytes() (int64, error) {
	if b.budget != "" && b.preset != "" {
		return 0, usagef("give --budget or --preset, not both")
	}
	if b.preset != "" {
		for _, p := range presets {
			if p.name == b.preset {
				return p.bytes, nil
			}
		}
		return 0, usagef("unknown preset %q", b.preset)
	}
	if b.budget == "" {
		return 0, nil
	}
	n, err := parseSize(b.budget)
	if err != nil {
		return 0, usagef("--budget: %v", err)
	}
	if n == 0 {
		return 0, usagef("--budget must be positive (use --preset max for no limit)")
	}
	return n, nil
}

// statsJSON is the "stats" object of --json output.
type statsJSON struct {
	BudgetBytes     int64   `json:"budget_bytes"`
	PlannedBytes    int64   `json:"planned_bytes"`
	BytesRead       int64   `json:"bytes_read"`
	TrunkBytesRead  int64   `json:"trunk_bytes_read"`
	ExpertBytesRead int64   `json:"expert_bytes_read"`
	CacheHits       int64   `json:"cache_hits"`
	CacheMisses     int64   `json:"cache_misses"`
	PinnedLayers    int     `json:"pinned_layers"`
	StreamedParts   int     `json:"streamed_parts"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	IOSeconds       float64 `json:"io_seconds"`
	ComputeSeconds  float64 `json:"compute_seconds"`
	WaitSeconds     float64 `json:"wait_seconds"`
	ForwardSeconds  float64 `json:"forward_seconds"`
	ReadGBps        float64 `json:"read_gbps"`
	Passes          int64   `json:"passes"`
	SpecPasses      int64   `json:"spec_passes,omitempty"`
	SpecRows        int64   `json:"spec_rows,omitempty"`
	SpecAccepted    int64   `json:"spec_accepted,omitempty"`
}

func toStatsJSON(s k3.Stats) *statsJSON {
	return &statsJSON{
		BudgetBytes: s.BudgetBytes, PlannedBytes: s.PlannedBytes, BytesRead: s.BytesRead,
		TrunkBytesRead: s.TrunkBytesRead, ExpertBytesRead: s.ExpertBytesRead,
		CacheHits: s.CacheHits, CacheMisses: s.CacheMisses, PinnedLayers: s.PinnedLayers, StreamedParts: s.StreamedParts,
		PeakRSSBytes: s.PeakRSSBytes, IOSeconds: s.IOTime.Seconds(), ComputeSeconds: s.ComputeTime.Seconds(),
		WaitSeconds: s.WaitTime.Seconds(), ForwardSeconds: s.ForwardTime.Seconds(), ReadGBps: s.ReadGBps(),
		Passes: s.Passes, SpecPasses: s.SpecPasses, SpecRows: s.SpecRows, SpecAccepted: s.SpecAccepted,
	}
}

func formatStats(s k3.Stats) string {
	gb := func(n int64) float64 { return float64(n) / 1e9 }
	budget := "unlimited"
	if s.BudgetBytes > 0 {
		budget = fmt.Sprintf("%.2f GB", gb(s.BudgetBytes))
	}
	return fmt.Sprintf("budget %s (planned %.2f GB), %d layers pinned, %d parts streamed\n"+
		"read %.3f GB (trunk %.3f, experts %.3f) at %.2f GB/s; cache %d hits, %d misses\n"+
		"forward %.3f s: compute %.3f s, waiting for weights %.3f s; I/O busy %.3f s; peak RSS %.2f GB",
		budget, gb(s.PlannedBytes), s.PinnedLayers, s.StreamedParts,
		gb(s.BytesRead), gb(s.TrunkBytesRead), gb(s.ExpertBytesRead), s.ReadGBps(), s.CacheHits, s.CacheMisses,
		s.ForwardTime.Seconds(), s.ComputeTime.Seconds(), s.WaitTime.Seconds(), s.IOTime.Seconds(), gb(s.PeakRSSBytes))
}
