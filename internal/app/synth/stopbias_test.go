package synth

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/k3go/k3"
)

// TestStopBias: the stop bias changes exactly the head's rows of the two
// stop tokens, to ±bias on the first hidden dimension, and then the model
// picks a stop token at most positions.
func TestStopBias(t *testing.T) {
	plain, _ := writeTiny(t, Quickstart(), WriteOptions{})
	biased, _ := writeTiny(t, Quickstart(), WriteOptions{StopBias: 8})
	L, err := PlanLayout(Quickstart(), 0)
	if err != nil {
		t.Fatal(err)
	}
	sh := L.Shards[0]
	a, b := readFile(t, plain, sh.Name), readFile(t, biased, sh.Name)
	if len(a) != len(b) {
		t.Fatalf("sizes %d and %d", len(a), len(b))
	}
	var head Tensor
	for _, x := range sh.Tensors {
		if x.Name == lmHeadName {
			head = x
		}
	}
	E := int64(head.Shape[1])
	stops := []int{L.Config.Vocab - 6, L.Config.Vocab - 7} // <|end_of_msg|>, [EOS] in the generated tokenizer
	for k, id := range stops {
		off := head.Offset + int64(id)*E*2
		row := b[off : off+E*2]
		first := math.Float32frombits(uint32(binary.LittleEndian.Uint16(row)) << 16)
		if want := float32(8 - 16*k); first != want || !bytes.Equal(row[2:], make([]byte, E*2-2)) {
			t.Errorf("row of token %d starts %v (want %v), the rest zero: %v", id, first, want, row[:8])
		}
		copy(a[off:off+E*2], row) // the only bytes that may differ
	}
	if !bytes.Equal(a, b) {
		t.Error("the stop bias changed bytes besides the two rows")
	}

	m, err := k3.Open(biased, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	picked := 0
	for _, id := range prompt16 {
		lg, err := m.NewSession().Step(ctx, []int{id % L.Config.Vocab})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(stops, argmax(lg)) {
			picked++
		}
	}
	if picked < len(prompt16)/2 {
		t.Errorf("a stop token is the most likely after %d of %d tokens", picked, len(prompt16))
	}
}

// TestCloseBias: the close bias changes exactly the head's rows of
// <|close|> and the quote token, to ±bias on the second hidden dimension
// (independent of the stop bias's first), and then the model picks one of
// the two at most positions.
func TestCloseBias(t *testing.T) {
	plain, _ := writeTiny(t, Quickstart(), WriteOptions{StopBias: 8})
	biased, _ := writeTiny(t, Quickstart(), WriteOptions{StopBias: 8, CloseBias: 8})
	L, err := PlanLayout(Quickstart(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := closeTokenIDs(readFile(t, biased, tokenizerFiles[1]), readFile(t, biased, tokenizerFiles[0]), L.Config.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	sh := L.Shards[0]
	a, b := readFile(t, plain, sh.Name), readFile(t, biased, sh.Name)
	var head Tensor
	for _, x := range sh.Tensors {
		if x.Name == lmHeadName {
			head = x
		}
	}
	E := int64(head.Shape[1])
	for k, id := range ids {
		off := head.Offset + int64(id)*E*2
		row := b[off : off+E*2]
		second := math.Float32frombits(uint32(binary.LittleEndian.Uint16(row[2:])) << 16)
		rest := append(append([]byte{}, row[:2]...), row[4:]...)
		if want := float32(8 - 16*k); second != want || !bytes.Equal(rest, make([]byte, E*2-2)) {
			t.Errorf("row of token %d: second value %v (want %v), the rest zero: %v", id, second, want, row[:8])
		}
		copy(a[off:off+E*2], row)
	}
	if !bytes.Equal(a, b) {
		t.Error("the close bias changed bytes besides the two rows")
	}
	m, err := k3.Open(biased, k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	stops := []int{L.Config.Vocab - 6, L.Config.Vocab - 7}
	picked := 0
	for _, id := range prompt16 {
		lg, err := m.NewSession().Step(ctx, []int{id % L.Config.Vocab})
		if err != nil {
			t.Fatal(err)
		}
		// The stop tokens are what a constrained answer masks: the best
		// of the others.
		for _, s := range stops {
			lg[s] = float32(math.Inf(-1))
		}
		if slices.Contains(ids, argmax(lg)) {
			picked++
		}
	}
	if picked < len(prompt16)/2 {
		t.Errorf("<|close|> or the quote is the most likely (stop tokens masked) after %d of %d tokens", picked, len(prompt16))
	}
}
