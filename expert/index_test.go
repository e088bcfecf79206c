package expert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3/cache"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/iox"
	"github.com/k3go/k3/quant"
)

// The cache fixture: 24 experts of layer 0, six U8 tensors each (packed
// [8,64], scale [8,4], for w1, w2, w3), contiguous, 1,632 bytes per expert
// (deliberately not a multiple of 4096). Byte k of a tensor is
// (k + base) mod 251 with base = (e·977 + which·31 + (0 if packed else 7)) & 0xFF.
const (
	fixtureExperts = 24
	fixtureBytes   = 1632
)

var fixtureShapes = Shapes{{8, 128}, {8, 128}, {8, 128}}

func fixtureByte(e, which int, packed bool, k int) byte {
	base := e*977 + which*31
	if !packed {
		base += 7
	}
	base &= 0xFF
	return byte((k + base) % 251)
}

// directReader returns a ReadFunc through an O_DIRECT iox.Reader over the
// checkpoint's shards.
func directReader(t *testing.T, ck *iox.Checkpoint) iox.ReadFunc {
	t.Helper()
	rd, err := iox.NewReader(iox.ReaderOptions{QueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	var files []*iox.File
	for _, sh := range ck.Shards {
		f, err := iox.OpenFile(sh.Path, iox.FileOptions{Direct: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		files = append(files, f)
	}
	return func(ctx context.Context, x iox.Extent, buf []byte) error {
		_, w := x.Window()
		f := rd.Submit(ctx, iox.Request{Src: files[x.File], Off: x.Off, Len: int(x.Size), Dst: buf[x.Region : x.Region+w]})
		_, err := f.Wait()
		<-f.Released()
		return err
	}
}

func openFixture(t *testing.T) (*iox.Checkpoint, *Index) {
	t.Helper()
	ck, err := iox.OpenCheckpoint(fixtures.Path(t, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	x, err := Build(ck, []bool{true}, fixtureExperts, fixtureShapes)
	if err != nil {
		t.Fatal(err)
	}
	return ck, x
}

// checkExpert verifies an expert's bound matrices byte for byte.
func checkExpert(t *testing.T, x *Index, e int, payload []byte) {
	t.Helper()
	var m [3]quant.Linear
	x.Layout(0, e).Bind(payload, &m)
	for w := range m {
		if !m[w].IsMX || m[w].MX.Rows != 8 || m[w].MX.Cols != 128 {
			t.Fatalf("expert %d w%d bound as %v", e, w+1, m[w].String())
		}
		for k, b := range m[w].MX.Packed {
			if b != fixtureByte(e, w, true, k) {
				t.Fatalf("expert %d w%d packed byte %d = %d, want %d", e, w+1, k, b, fixtureByte(e, w, true, k))
			}
		}
		for k, b := range m[w].MX.Scales {
			if b != fixtureByte(e, w, false, k) {
				t.Fatalf("expert %d w%d scale byte %d = %d, want %d", e, w+1, k, b, fixtureByte(e, w, false, k))
			}
		}
	}
}

func alignedSlots(t *testing.T, n int, size int64) [][]byte {
	t.Helper()
	buf, err := iox.AllocAligned(n*int(size), iox.BufferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free() })
	out := make([][]byte, n)
	for i := range out {
		out[i] = buf.Bytes()[int64(i)*size : int64(i+1)*size]
	}
	return out
}

func TestFixtureIndex(t *testing.T) {
	_, x := openFixture(t)
	if x.Count() != fixtureExperts || x.ExpertBytes() != fixtureBytes {
		t.Fatalf("%d experts of %d bytes, want %d of %d", x.Count(), x.ExpertBytes(), fixtureExperts, fixtureBytes)
	}
	if want := iox.AlignUp(fixtureBytes) + iox.Align; x.SlotBytes() != want {
		t.Fatalf("slot %d bytes, want %d (aligned window plus slack)", x.SlotBytes(), want)
	}
	for e := 0; e < fixtureExperts; e++ {
		if loc := x.Loc(0, e); !loc.Contiguous() || loc.Size != fixtureBytes {
			t.Fatalf("expert %d: %+v, want one contiguous run of %d bytes", e, loc, fixtureBytes)
		}
	}
}

// TestFixtureSerialReads reads every expert with one direct read each into
// aligned slots whose payloads start mid-page.
func TestFixtureSerialReads(t *testing.T) {
	ck, x := openFixture(t)
	read := directReader(t, ck)
	slots := alignedSlots(t, 1, x.SlotBytes())
	for e := 0; e < fixtureExperts; e++ {
		payload, err := x.Load(context.Background(), read, 0, e, slots[0])
		if err != nil {
			t.Fatal(err)
		}
		checkExpert(t, x, e, payload)
	}
	if _, err := x.Load(context.Background(), read, 0, 0, make([]byte, 100)); err == nil {
		t.Fatal("a slot smaller than the read window accepted")
	}
}

// TestFixtureThroughCache reads the experts through the byte-budgeted cache
// with fewer slots than experts (K+1 = 3 for top-2): serial Gets, a batch
// prefetch, async loads on other goroutines, and a mix with eviction;
// every payload byte-exact.
func TestFixtureThroughCache(t *testing.T) {
	ck, x := openFixture(t)
	read := directReader(t, ck)
	arena, err := iox.AllocAligned(3*int(x.SlotBytes()), iox.BufferOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Free()
	c, err := cache.New(cache.Options{SlotSize: int(x.SlotBytes()), Arena: arena.Bytes(), MinSlots: 3})
	if err != nil {
		t.Fatal(err)
	}
	load := func(ctx context.Context, k cache.Key, slot []byte) ([]byte, error) {
		return x.Load(ctx, read, int(k.Layer), int(k.Expert), slot)
	}
	ctx := context.Background()
	get := func(e int) {
		h, err := c.Get(ctx, cache.Key{Layer: 0, Expert: int32(e)}, load)
		if err != nil {
			t.Fatal(err)
		}
		checkExpert(t, x, e, h.Bytes())
		h.Release()
	}
	// Serial, then again (hits and evictions).
	for round := 0; round < 2; round++ {
		for e := 0; e < fixtureExperts; e++ {
			get(e)
		}
	}
	// Batch prefetch of two, run on other goroutines.
	var wg sync.WaitGroup
	for e := 0; e+1 < fixtureExperts; e += 2 {
		keys := []cache.Key{{Expert: int32(e)}, {Expert: int32(e + 1)}}
		hs := make([]*cache.Handle, 2)
		if err := c.Prefetch(ctx, keys, hs, func(f cache.Fill) { wg.Go(func() { f.Run(ctx, load) }) }); err != nil {
			t.Fatal(err)
		}
		for i, h := range hs {
			p, err := h.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkExpert(t, x, e+i, p)
			h.Release()
		}
	}
	wg.Wait()
	// Mixed: several goroutines, random experts.
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 50; i++ {
				get(rng.IntN(fixtureExperts))
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Evictions == 0 || st.Hits == 0 {
		t.Fatalf("stats %+v: expected both evictions and hits", st)
	}
}

// writeShard writes a safetensors file of U8 tensors (name -> bytes) in the
// given order.
func writeShard(t *testing.T, path string, names []string, data map[string][]byte, shapes map[string][]int) {
	t.Helper()
	h := map[string]any{}
	var body bytes.Buffer
	for _, n := range names {
		d := data[n]
		h[n] = map[string]any{"dtype": "U8", "shape": shapes[n], "data_offsets": []int{body.Len(), body.Len() + len(d)}}
		body.Write(d)
	}
	js, _ := json.Marshal(h)
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, uint64(len(js)))
	out.Write(js)
	out.Write(body.Bytes())
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestIrregularLayout stores one expert's tensors out of order with a gap:
// it is indexed as several requests and still reads byte-exact; the
// others stay single runs.
func TestIrregularLayout(t *testing.T) {
	dir := t.TempDir()
	data, shapes := map[string][]byte{}, map[string][]int{}
	var names []string
	for e := 0; e < 3; e++ {
		for w := 0; w < 3; w++ {
			for _, packed := range []bool{true, false} {
				suffix, shape := "weight_packed", []int{8, 64}
				if !packed {
					suffix, shape = "weight_scale", []int{8, 4}
				}
				n := Name(0, e, w+1, suffix)
				b := make([]byte, shape[0]*shape[1])
				for k := range b {
					b[k] = fixtureByte(e, w, packed, k)
				}
				data[n], shapes[n] = b, shape
				names = append(names, n)
			}
		}
	}
	// Expert 1: swap w1 and w3 and put a filler tensor in between.
	gap := "filler"
	data[gap], shapes[gap] = make([]byte, 100), []int{100}
	reordered := append([]string{}, names[:6]...)
	reordered = append(reordered, names[10], names[11], gap, names[8], names[9], names[6], names[7])
	reordered = append(reordered, names[12:]...)
	writeShard(t, filepath.Join(dir, "model.safetensors"), reordered, data, shapes)
	ck, err := iox.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	x, err := Build(ck, []bool{true}, 3, fixtureShapes)
	if err != nil {
		t.Fatal(err)
	}
	for e, want := range []bool{true, false, true} {
		if x.Loc(0, e).Contiguous() != want {
			t.Errorf("expert %d contiguous = %v, want %v", e, !want, want)
		}
	}
	read := directReader(t, ck)
	slots := alignedSlots(t, 1, x.SlotBytes())
	for e := 0; e < 3; e++ {
		p, err := x.Load(context.Background(), read, 0, e, slots[0])
		if err != nil {
			t.Fatal(err)
		}
		checkExpert(t, x, e, p)
	}
}

func TestBuildErrors(t *testing.T) {
	ck, err := iox.OpenCheckpoint(fixtures.Path(t, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for name, c := range map[string]struct {
		experts int
		shapes  Shapes
		msg     string
	}{
		"missing experts": {25, fixtureShapes, "experts.24.w1.weight_packed is missing"},
		"wrong shape":     {24, Shapes{{8, 128}, {16, 128}, {8, 128}}, "do not describe MXFP4 [16 128]"},
		"odd width":       {24, Shapes{{8, 100}, {8, 128}, {8, 128}}, "multiple of the MXFP4 group size"},
	} {
		_, err := Build(ck, []bool{true}, c.experts, c.shapes)
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: got %v, want ErrLayout mentioning %q", name, err, c.msg)
		}
	}
}
