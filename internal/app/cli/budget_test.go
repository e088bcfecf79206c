package cli

import (
	"errors"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/platform/sysinfo"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestMain(m *testing.M) { testmodel.Main(m) }

// TestAutoBudget: --budget auto is the available memory (the room under a
// cgroup limit if smaller, the total if nothing else is known) minus a
// tenth; an unknown machine is a usage error.
func TestAutoBudget(t *testing.T) {
	defer func(f func() (sysinfo.MemInfo, error)) { memoryInfo = f }(memoryInfo)
	for _, c := range []struct {
		mi   sysinfo.MemInfo
		err  error
		want int64 // 0: a usage error
	}{
		{sysinfo.MemInfo{Total: 64e9, Available: 40e9}, nil, 36e9},
		{sysinfo.MemInfo{Total: 64e9, Available: 40e9, CgroupLimit: 16e9, CgroupUsage: 6e9, CgroupVersion: 2}, nil, 9e9},
		{sysinfo.MemInfo{Total: 64e9}, nil, 57.6e9},
		{sysinfo.MemInfo{}, nil, 0},
		{sysinfo.MemInfo{}, errors.ErrUnsupported, 0},
	} {
		memoryInfo = func() (sysinfo.MemInfo, error) { return c.mi, c.err }
		for _, flag := range []string{"auto", "AUTO", " Auto "} {
			b := BudgetFlags{Budget: flag}
			got, err := b.Bytes()
			if c.want == 0 {
				if ExitCode(err) != ExitUsage {
					t.Errorf("%+v, %v: %d, %v; want a usage error", c.mi, c.err, got, err)
				}
				continue
			}
			if err != nil || got != c.want || !b.Auto() {
				t.Errorf("%+v: --budget %q = %d, %v; want %d", c.mi, flag, got, err, c.want)
			}
		}
	}
	if b := (BudgetFlags{Budget: "auto", Preset: "max"}); func() error { _, err := b.Bytes(); return err }() == nil {
		t.Error("--budget auto with --preset accepted")
	}
}

// TestAutoBudgetFloor: below the checkpoint's floor, --budget auto gives
// the floor; above it, or for a given size, the budget is unchanged.
func TestAutoBudgetFloor(t *testing.T) {
	dir := testmodel.Dir(t)
	in, err := k3.Inspect(dir, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	auto, sized := BudgetFlags{Budget: "auto"}, BudgetFlags{Budget: "1MB"}
	for _, c := range []struct {
		b      BudgetFlags
		dir    string
		budget int64
		want   int64
	}{
		{auto, dir, 1 << 20, in.FloorBytes},
		{auto, dir, in.FloorBytes + 12345, in.FloorBytes + 12345},
		{sized, dir, 1 << 20, 1 << 20},
		{auto, "", 1 << 20, 1 << 20},
		{auto, t.TempDir(), 1 << 20, 1 << 20}, // not a checkpoint: opening it says so
	} {
		if got := c.b.AtLeastFloor(c.dir, k3.Options{RAMBudget: c.budget}); got != c.want {
			t.Errorf("%+v in %q at %d: %d, want %d", c.b, c.dir, c.budget, got, c.want)
		}
	}
	if in.FloorBytes <= 1<<20 {
		t.Fatalf("floor %d: the test needs one above 1 MiB", in.FloorBytes)
	}
}
