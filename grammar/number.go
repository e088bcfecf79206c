package grammar

import "github.com/k3go/k3/grammar/internal/lexer"

// A number frame keeps the phase, the sign and the number of fraction
// digits in a, and the digits read so far, as one integer M, in b (low 32
// bits) and c (high 32 bits).

func numFrame(f frame) lexer.NumState {
	return lexer.NumState{Ph: f.a & 7, Neg: f.a&8 != 0, FD: int(f.a >> 4 & 31), M: int64(uint64(f.b) | uint64(f.c)<<32)}
}

func setNum(f frame, st lexer.NumState) frame {
	f.a = st.Ph | uint32(st.FD)<<4
	if st.Neg {
		f.a |= 8
	}
	f.b, f.c = uint32(uint64(st.M)), uint32(uint64(st.M)>>32)
	return f
}

// stepNumber feeds symbol x to a number frame (see stepString).
func stepNumber(s *lexer.Number, f frame, x sym) (frame, bool, bool) {
	st, ok, done := s.Step(numFrame(f), x)
	if !ok {
		return f, false, done
	}
	return setNum(f, st), true, false
}

// numberCanEnd reports whether the number may end in frame f.
func numberCanEnd(s *lexer.Number, f frame) bool { return s.CanEnd(numFrame(f)) }
