package iox_test

import (
	"testing"
	"unsafe"

	"github.com/k3go/k3/iox"
)

func TestAllocAligned(t *testing.T) {
	base := iox.AllocatedBytes()
	live := iox.LiveBuffers()
	for _, huge := range []bool{false, true} {
		for _, n := range []int{1, 1632, 4095, 4096, 4097, 17_555_456, 3<<20 + 1} {
			b, err := iox.AllocAligned(n, iox.BufferOptions{HugePages: huge, Populate: n < 1<<20})
			if err != nil {
				t.Fatal(err)
			}
			align := uintptr(iox.Align)
			if huge {
				align = iox.HugePageSize
			}
			mem := b.Bytes()
			if len(mem) != n || b.Len() != n {
				t.Fatalf("len %d, want %d", len(mem), n)
			}
			if addr := uintptr(unsafe.Pointer(&mem[0])); addr%align != 0 {
				t.Fatalf("huge=%v n=%d: address %#x not aligned to %d", huge, n, addr, align)
			}
			if b.Mapped()%int64(align) != 0 || b.Mapped() < int64(n) || b.Mapped() >= int64(n)+int64(align) {
				t.Fatalf("Mapped %d for n=%d align %d", b.Mapped(), n, align)
			}
			if got := iox.AllocatedBytes() - base; got != b.Mapped() {
				t.Fatalf("AllocatedBytes grew by %d, want %d", got, b.Mapped())
			}
			if huge && b.HugePageErr() != nil {
				t.Logf("MADV_HUGEPAGE: %v", b.HugePageErr())
			}
			for i := range mem {
				if mem[i] != 0 {
					t.Fatalf("not zeroed at %d", i)
				}
			}
			mem[0], mem[n-1] = 1, 2
			full := mem[:b.Mapped()] // the rounded tail is mapped too
			full[len(full)-1] = 3
			if err := b.Free(); err != nil {
				t.Fatal(err)
			}
			if err := b.Free(); err != nil {
				t.Fatal("second Free:", err)
			}
			if b.Bytes() != nil {
				t.Fatal("Bytes after Free")
			}
			if iox.AllocatedBytes() != base || iox.LiveBuffers() != live {
				t.Fatalf("after Free: %d bytes, %d buffers allocated", iox.AllocatedBytes()-base, iox.LiveBuffers()-live)
			}
		}
	}
	if b, err := iox.AllocAligned(0, iox.BufferOptions{}); err != nil || b.Len() != 0 || b.Free() != nil {
		t.Fatal("AllocAligned(0)")
	}
	if _, err := iox.AllocAligned(-1, iox.BufferOptions{}); err == nil {
		t.Fatal("AllocAligned(-1) succeeded")
	}
}
