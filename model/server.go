package model

import (
	"context"
	"fmt"
	"slices"
)

// Server computes one rank's share of the rounds rank 0 sends (a rank
// other than 0 runs no pass of its own): it takes each round's layer part
// from the model's layer source as the rounds reach it, in pass order,
// holding it until a round of another part comes (the experts and the head
// need no part), so that a streaming trunk reads ahead exactly as in a
// pass. One Server serves one rank 0 at a time; End gives back what it
// holds.
type Server struct {
	m      *Model
	held   heldPart
	mats   *LayerMats
	inPass bool
	work   RoundWork
	heads  *HeadStore
}

// NewServer returns a Server over m, a model of a sharded plan's rank,
// holding no state's heads yet.
func (m *Model) NewServer() *Server { return &Server{m: m, heads: m.NewHeadStore()} }

// Heads returns the Server's heads of the states of rank 0's sequences
// (RoundKDA).
func (s *Server) Heads() *HeadStore { return s.heads }

// Round computes this rank's rows of every product of rd and returns them
// (Slices): product i's N × its rows in slice i, valid until the next
// call.
func (s *Server) Round(ctx context.Context, rd *Round) ([][]float32, error) {
	part, ok := PartAttn, true
	switch rd.Kind {
	case RoundAttn, RoundKDA:
	case RoundFFN:
		part = PartFFN
	case RoundExpertUp, RoundExpertDown:
		// Its layer products (the shared experts' down projection) read
		// the layer's FFN part.
		part, ok = PartFFN, slices.ContainsFunc(rd.Products, func(pr Product) bool { return pr.Layer })
	default:
		ok = false
	}
	if !ok {
		return s.m.Slices(ctx, rd, nil, &s.work)
	}
	if rd.Layer < 0 || rd.Layer >= s.m.Cfg.Layers {
		return nil, fmt.Errorf("model: round of layer %d of %d", rd.Layer, s.m.Cfg.Layers)
	}
	if !s.held.ok || s.held.layer != rd.Layer || s.held.part != part {
		s.release()
		if !s.inPass {
			if pl, ok := s.m.layers.(PassLocker); ok {
				pl.BeginPass()
			}
			s.inPass = true
		}
		mats, err := s.m.layers.Acquire(ctx, rd.Layer, part)
		if err != nil {
			return nil, fmt.Errorf("layer %d %s: %w", rd.Layer, part, err)
		}
		s.held, s.mats = heldPart{layer: rd.Layer, part: part, ok: true}, mats
	}
	if rd.Kind == RoundKDA {
		s.work.states = s.heads
		defer func() { s.work.states = nil }()
	}
	return s.m.Slices(ctx, rd, s.mats, &s.work)
}

// release gives back the held layer part.
func (s *Server) release() {
	if s.held.ok {
		s.m.layers.Release(s.held.layer, s.held.part)
		s.held.ok, s.mats = false, nil
	}
}

// Prefetch begins reading this rank's half (expert.HalfUp or HalfDown)
// of experts of layer, for the expert round that will ask for them.
func (s *Server) Prefetch(ctx context.Context, layer, half int, experts []int32) error {
	return s.m.PrefetchExperts(ctx, &s.work, layer, half, experts)
}

// End gives back the held part, any experts begun ahead and every state's
// heads, and ends the Server's turn on the layer source (rank 0 left, or
// failed: a rank 0 that connects again knows its sequences' states are
// gone from this rank, whose rounds say so).
func (s *Server) End() {
	s.heads = s.m.NewHeadStore()
	s.m.EndPrefetch(&s.work)
	s.release()
	if s.inPass {
		if pl, ok := s.m.layers.(PassLocker); ok {
			pl.EndPass()
		}
		s.inPass = false
	}
}
