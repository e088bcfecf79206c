package model

import (
	"context"
	"errors"
	"testing"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/platform/crash"
)

// panickyExperts panics in Get once armed, and counts Begin and End.
type panickyExperts struct {
	expert.Source
	armed       bool
	begun, ends int
}

func (p *panickyExperts) Begin(ctx context.Context, b *expert.Batch) error {
	p.begun++
	return p.Source.Begin(ctx, b)
}

func (p *panickyExperts) Get(ctx context.Context, b *expert.Batch, i int) (*expert.Expert, error) {
	if p.armed {
		p.armed = false
		panic("injected panic in an expert source")
	}
	return p.Source.Get(ctx, b, i)
}

func (p *panickyExperts) End(b *expert.Batch) {
	p.ends++
	p.Source.End(b)
}

// TestPassPanicIsAnError checks that a panic inside a forward pass (here
// in the expert source, between Begin and End) returns an error wrapping
// crash.ErrInternal with the panic's stack, gives back what the pass held
// (End is called, the scratch's expert marks are cleared), and that the
// next pass over a fresh state gives the same logits as a model that never
// panicked.
func TestPassPanicIsAnError(t *testing.T) {
	ref, exp := loadOracle(t, "tiny-mxfp4")
	want := teacherLogits(t, ref, exp.FullIDs)
	read := func(ctx context.Context, e Extent, buf []byte) error {
		return ref.Plan.Ckpt.ReadRange(e.File, e.Off, buf[e.BufOff:e.BufOff+e.Size])
	}
	res, err := expert.LoadResident(context.Background(), ref.Plan.Experts(), read, func(n int64) ([]byte, error) { return make([]byte, n), nil })
	if err != nil {
		t.Fatal(err)
	}
	px := &panickyExperts{Source: res, armed: true}
	m, err := Load(context.Background(), ref.Plan, read, Options{Experts: px})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sc := NewScratch(m.Cfg, 64, 0)
	V := m.Cfg.Vocab
	out := make([]float32, len(exp.FullIDs)*V)
	gs := []Group{{St: NewState(m.Cfg, 64), Tokens: exp.FullIDs, All: true, Out: out}}
	err = m.ForwardBatch(context.Background(), sc, gs)
	if !errors.Is(err, crash.ErrInternal) || len(crash.Stack(err)) == 0 {
		t.Fatalf("a panicking expert source gave %v, want an internal error with a stack", err)
	}
	if px.begun != px.ends {
		t.Fatalf("Begin called %d times, End %d", px.begun, px.ends)
	}
	for e, v := range sc.seen {
		if v != 0 {
			t.Fatalf("expert %d still marked seen after the panic", e)
		}
	}
	gs[0].St = NewState(m.Cfg, 64)
	if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("after the panic, logit %d = %v, want %v", i, out[i], want[i])
		}
	}
}
