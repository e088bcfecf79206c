package iox_test

import (
	"testing"

	"github.com/k3go/k3/iox"
)

func TestWindow(t *testing.T) {
	for _, c := range []struct {
		off    int64
		n      int
		start  int64
		length int
		pad    int
	}{
		{0, 0, 0, 0, 0},
		{5000, 0, 4096, 0, 904},
		{0, 1, 0, 4096, 0},
		{0, 4096, 0, 4096, 0},
		{0, 4097, 0, 8192, 0},
		{1, 4095, 0, 4096, 1},
		{1, 4096, 0, 8192, 1},
		{4095, 2, 0, 8192, 4095},
		{4096, 1632, 4096, 4096, 0},
		{12345, 1632, 12288, 4096, 57},
		{8192 + 3000, 1632, 8192, 8192, 3000}, // 1,632 bytes crossing a block boundary
		{0, 17_547_264, 0, 17_547_264, 0},     // an expert is 4,284 blocks: by coincidence
		{100, 17_547_264, 0, 17_547_264 + 4096, 100},
		{1<<40 + 7, 17_547_264, 1 << 40, 17_547_264 + 4096, 7},
	} {
		start, length, pad := iox.Window(c.off, c.n)
		if start != c.start || length != c.length || pad != c.pad {
			t.Errorf("Window(%d, %d) = %d, %d, %d; want %d, %d, %d", c.off, c.n, start, length, pad, c.start, c.length, c.pad)
		}
		if start%iox.Align != 0 || length%iox.Align != 0 || length > c.n+2*iox.Align-2 {
			t.Errorf("Window(%d, %d) not aligned or too long", c.off, c.n)
		}
		if got := iox.WindowLen(c.off, c.n); got != length {
			t.Errorf("WindowLen(%d, %d) = %d", c.off, c.n, got)
		}
		if c.n > 0 && c.off+int64(c.n) > start+int64(length) {
			t.Errorf("Window(%d, %d) does not cover the payload", c.off, c.n)
		}
	}
	if iox.AlignUp(1) != 4096 || iox.AlignUp(4096) != 4096 || iox.AlignDown(8191) != 4096 {
		t.Error("AlignUp/AlignDown")
	}
	buf := make([]byte, 3*iox.Align)
	p := iox.Payload(buf, 12345, 10)
	if &p[0] != &buf[57] || len(p) != 10 || cap(p) != 10 {
		t.Error("Payload")
	}
}
