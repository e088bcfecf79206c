package cache_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/k3go/k3/cache"
	"github.com/k3go/k3/internal/testkit/fixtures"
)

type tensorSpan struct{ off, end int64 }

// expertSpans reads the safetensors header of the cache fixture and
// returns, per expert of layer 0, the absolute file range of its six
// tensors (w1, w2, w3; packed and scale), checking that they are contiguous.
func expertSpans(t *testing.T, f *os.File) (map[int32]tensorSpan, map[int32][]tensorSpan) {
	t.Helper()
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		t.Fatal(err)
	}
	hlen := int64(binary.LittleEndian.Uint64(n[:]))
	hdr := make([]byte, hlen)
	if _, err := f.ReadAt(hdr, 8); err != nil {
		t.Fatal(err)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &meta); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^language_model\.model\.layers\.0\.block_sparse_moe\.experts\.(\d+)\.w[123]\.weight_(packed|scale)$`)
	spans := map[int32]tensorSpan{}
	parts := map[int32][]tensorSpan{}
	for name, raw := range meta {
		m := re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		var info struct {
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			t.Fatal(err)
		}
		e, _ := strconv.Atoi(m[1])
		ts := tensorSpan{8 + hlen + info.Offsets[0], 8 + hlen + info.Offsets[1]}
		parts[int32(e)] = append(parts[int32(e)], ts)
		s, ok := spans[int32(e)]
		if !ok {
			s = ts
		}
		spans[int32(e)] = tensorSpan{min(s.off, ts.off), max(s.end, ts.end)}
	}
	for e, ps := range parts {
		var sum int64
		for _, p := range ps {
			sum += p.end - p.off
		}
		if len(ps) != 6 || sum != spans[e].end-spans[e].off {
			t.Fatalf("expert %d: %d tensors, %d bytes, not one contiguous run", e, len(ps), sum)
		}
	}
	return spans, parts
}

// directLoader reads like an O_DIRECT read would: the 4096-aligned window
// around the expert, so the payload starts at the expert's offset within
// that window.
func directLoader(f io.ReaderAt, spans map[int32]tensorSpan) cache.Loader {
	return func(ctx context.Context, k cache.Key, slot []byte) ([]byte, error) {
		s, ok := spans[k.Expert]
		if !ok || k.Layer != 0 {
			return nil, fmt.Errorf("no expert %v", k)
		}
		lo := s.off &^ 4095
		hi := (s.end + 4095) &^ 4095
		if hi-lo > int64(len(slot)) {
			return nil, fmt.Errorf("window of %d bytes does not fit a %d-byte slot", hi-lo, len(slot))
		}
		n, err := f.ReadAt(slot[:hi-lo], lo)
		if err != nil && !(errors.Is(err, io.EOF) && int64(n) >= s.end-lo) {
			return nil, err
		}
		return slot[s.off-lo : s.end-lo], nil
	}
}

// TestFixtureExperts reads the cache fixture's experts, 1,632 bytes each
// (not a multiple of 4096, at offsets that are not aligned), through a
// 4-slot cache with an O_DIRECT-style aligned-window loader, twice over so
// that slots are evicted and reused, and checks every payload against the
// file and against the fixture's byte pattern (each tensor's bytes are
// (i + base) mod 251).
func TestFixtureExperts(t *testing.T) {
	f, err := os.Open(fixtures.Path(t, "cache/model-00001-of-00001.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spans, parts := expertSpans(t, f)
	if len(spans) != 24 {
		t.Fatalf("%d experts in the fixture, want 24", len(spans))
	}
	size := spans[0].end - spans[0].off
	if size != 1632 {
		t.Fatalf("expert size %d, want 1632", size)
	}
	c, err := cache.New(cache.Options{SlotSize: int(size) + 8192, Budget: 4 * 12288, MinSlots: 4, Policy: cache.NewLRU()})
	if err != nil {
		t.Fatal(err)
	}
	load := directLoader(f, spans)
	for round := range 2 {
		for e := range int32(24) {
			k := cache.Key{Layer: 0, Expert: e}
			h, err := c.Get(context.Background(), k, load)
			if err != nil {
				t.Fatal(err)
			}
			s := spans[e]
			fileBytes := make([]byte, s.end-s.off)
			if _, err := f.ReadAt(fileBytes, s.off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(h.Bytes(), fileBytes) {
				t.Fatalf("round %d expert %d: payload differs from the file", round, e)
			}
			for _, p := range parts[e] {
				b := h.Bytes()[p.off-s.off : p.end-s.off]
				for i := range b {
					if b[i] != byte((i+int(b[0]))%251) {
						t.Fatalf("expert %d tensor at %d: byte %d = %d breaks the fixture pattern", e, p.off, i, b[i])
					}
				}
			}
			if s.off%4096 != 0 && addr(h.Bytes())%4096 == 0 {
				t.Errorf("expert %d: payload aligned although its file offset %d is not", e, s.off)
			}
			h.Release()
		}
	}
	if st := c.Stats(); st.Misses != 48 || st.Evictions != 44 || st.BytesLoaded != 48*1632 {
		t.Errorf("stats %+v", st)
	}
}
