package model

import "context"

// The op tests drive single layers of one sequence; these shims run them
// as a pass of one segment over the session's state.

func (s *Session) onePass(T int) *pass {
	s.sc.segs = append(s.sc.segs[:0], segment{st: s.st, lo: 0, n: T, p0: s.st.pos})
	p := &pass{ctx: context.Background(), m: s.m, c: s.m.Cfg, sc: s.sc, all: s.sc.segs, R: T}
	p.setTile(0)
	return p
}

func (s *Session) kda(l int, mats *LayerMats, vec *LayerVecs, T int) {
	if err := s.onePass(T).kda(l, mats, vec); err != nil {
		panic(err) // one process: no round can fail
	}
}

func (s *Session) mla(l int, mats *LayerMats, vec *LayerVecs, T int) {
	if err := s.onePass(T).mla(l, mats, vec); err != nil {
		panic(err)
	}
}

func (s *Session) moe(ctx context.Context, l int, mats *LayerMats, vec *LayerVecs, T int) error {
	return s.onePass(T).moe(ctx, l, mats, vec, moeInput{given: true})
}

func (s *Session) layer(ctx context.Context, l, T int, nb *int, nbMax int) error {
	return s.onePass(T).layer(ctx, l, nb, nbMax)
}

func (s *Session) routerScores(w *Linear, T int) {
	if err := s.onePass(T).routerScores(0, &LayerMats{Router: *w}); err != nil {
		panic(err)
	}
}
