package prefix_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/k3go/k3/internal/engine/prefix"
	"github.com/k3go/k3/iox"
)

// The engine hands the RAM tier off-heap buffers from iox.
var _ prefix.Buffer = (*iox.Buffer)(nil)

func TestOffHeapRAMTier(t *testing.T) {
	before := iox.LiveBuffers()
	s, err := prefix.Open(prefix.Options{Fingerprint: "fp", BlockSize: 8, RAMBytes: 1 << 20,
		Alloc: func(n int) (prefix.Buffer, error) { return iox.AllocAligned(n, iox.BufferOptions{}) }})
	if err != nil {
		t.Fatal(err)
	}
	p := s.Prompt([]int{1, 2, 3})
	k, m := p.StateMeta(3)
	m.Size = 10000
	data := bytes.Repeat([]byte{7}, 10000)
	if ok, err := s.Put(k, m, func(w io.Writer) error { _, err := w.Write(data); return err }); !ok || err != nil {
		t.Fatalf("Put: %v %v", ok, err)
	}
	if iox.LiveBuffers() != before+1 {
		t.Fatalf("live buffers %d, want %d", iox.LiveBuffers(), before+1)
	}
	r, err := s.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) || r.Close() != nil || r.Tier() != prefix.TierRAM {
		t.Fatalf("read back: %v", err)
	}
	s.Close()
	if iox.LiveBuffers() != before {
		t.Fatalf("live buffers %d after Close, want %d", iox.LiveBuffers(), before)
	}
}
