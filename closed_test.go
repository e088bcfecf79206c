package k3_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/k3go/k3"
)

// TestSessionClosed: after Close every method of a session fails with
// ErrClosed, Close again and Reset do nothing, and the budget place it
// held is free for another session.
func TestSessionClosed(t *testing.T) {
	ctx := context.Background()
	m, exp := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 64, RAMBudget: 56e6, Sessions: 1})
	s := m.NewSession()
	if _, err := s.Step(ctx, exp.PromptIDs); err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := s.Save(&state); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	s.Reset()
	if s.Len() != 0 {
		t.Errorf("closed session holds %d tokens", s.Len())
	}
	path := filepath.Join(t.TempDir(), "s.k3s")
	_, stepErr := s.Step(ctx, exp.PromptIDs)
	_, logitsErr := s.Logits(ctx, exp.PromptIDs)
	var genErr error
	for _, err := range s.Generate(ctx, exp.PromptIDs, k3.GenerateOptions{MaxTokens: 2}) {
		genErr = err
	}
	_, forkErr := s.Fork()
	for name, err := range map[string]error{
		"Step": stepErr, "Logits": logitsErr, "Generate": genErr, "Fork": forkErr,
		"Save":     s.Save(&bytes.Buffer{}),
		"SaveFile": s.SaveFile(path),
		"Load":     s.Load(bytes.NewReader(state.Bytes())),
		"LoadFile": s.LoadFile(path),
	} {
		if !errors.Is(err, k3.ErrClosed) {
			t.Errorf("%s on a closed session: %v, want ErrClosed", name, err)
		}
	}
	// The one place the budget reserves is free again.
	o := m.NewSession()
	defer o.Close()
	if err := o.Load(bytes.NewReader(state.Bytes())); err != nil {
		t.Fatalf("another session after Close: %v", err)
	}
	if o.Len() != len(exp.PromptIDs) {
		t.Errorf("restored %d tokens, want %d", o.Len(), len(exp.PromptIDs))
	}
}

// TestOpenReturnsFreedHeap: a budget is the process's peak RSS, so Open
// starts from a collected heap given back to the system. A closed model's
// heap is garbage that nothing else would collect before the next model's
// off-heap buffers add to it; here 256 MiB of garbage stands in for it.
func TestOpenReturnsFreedHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory changes the heap's accounting")
	}
	garbage := make([]byte, 256<<20)
	for i := range garbage {
		garbage[i] = byte(i)
	}
	runtime.KeepAlive(garbage)
	garbage = nil
	runtime.GC() // now free in the heap, still resident
	if free := heapFree(); free < 200<<20 {
		t.Skipf("the runtime returned the garbage already (%d MiB free in the heap)", free>>20)
	}
	// A budget far above the model's, so that the memory limit Open sets
	// does not itself make the runtime give memory back.
	m, _ := openOracle(t, "tiny-mxfp4", k3.Options{MaxContext: 64, RAMBudget: 16e9, Sessions: 1})
	defer m.Close()
	free := heapFree()
	t.Logf("free heap after Open: %.1f MiB", float64(free)/(1<<20))
	if free > 64<<20 {
		t.Errorf("after Open %d MiB of free heap is still resident; want it returned to the system", free>>20)
	}
}

// heapFree is the heap's free memory not yet returned to the system.
func heapFree() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
