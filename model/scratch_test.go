package model

import (
	"context"
	"math"
	"testing"
)

// TestScratchInMemoryBitIdentical runs the same wide pass over a heap
// scratch and over one laid out in borrowed memory that held other data
// (NaN bytes, at an odd offset): every logit is bit-identical, and the
// scratch uses no byte outside ScratchArenaBytes.
func TestScratchInMemoryBitIdentical(t *testing.T) {
	ref, exp := loadOracle(t, "tiny-mxfp4")
	V := ref.Cfg.Vocab
	ids := exp.FullIDs
	const rows, tile = 24, 5
	run := func(sc *Scratch) []float32 {
		st := NewState(ref.Cfg, 64)
		out := make([]float32, len(ids)*V)
		if err := ref.ForwardBatch(context.Background(), sc, []Group{{St: st, Tokens: ids, All: true, Out: out}}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := run(NewScratch(ref.Cfg, rows, tile))

	need := ScratchArenaBytes(ref.Cfg, rows, tile)
	const guard = 4096
	mem := make([]byte, 3+need+guard)
	for i := range mem {
		mem[i] = 0xff // NaN in every float the scratch might read before writing
	}
	lent := mem[3 : 3+need]
	if _, err := NewScratchIn(ref.Cfg, rows, tile, lent[:need-1]); err == nil {
		t.Fatal("NewScratchIn accepted memory one byte short")
	}
	sc, err := NewScratchIn(ref.Cfg, rows, tile, lent)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Rows() != rows || sc.Tile() != tile {
		t.Fatalf("rows, tile = %d, %d; want %d, %d", sc.Rows(), sc.Tile(), rows, tile)
	}
	got := run(sc)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %v in borrowed memory, %v on the heap", i, got[i], want[i])
		}
	}
	for i, b := range mem[3+need:] {
		if b != 0xff {
			t.Fatalf("byte %d past the scratch's %d was written", i, need)
		}
	}
	if ScratchArenaBytes(ref.Cfg, 2*rows, tile) <= need {
		t.Fatal("a scratch of twice the rows needs no more memory")
	}
}
