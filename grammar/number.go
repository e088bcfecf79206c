package grammar

// numSpec is a JSON number without exponent whose value, counted in units
// of 10^-frac, is an integer N with lo <= N <= hi and N a multiple of
// mult. frac 0 makes it an integer.
//
// A number frame keeps the phase, the sign and the number of fraction
// digits in a, and the digits read so far, as one integer M, in b (low 32
// bits) and c (high 32 bits).
type numSpec struct {
	frac   uint8
	lo, hi int64
	mult   int64
}

// maxUnits bounds the magnitude of a number, in units: 18 digits.
const maxUnits = 999_999_999_999_999_999

var pow10 = func() [19]int64 {
	var p [19]int64
	p[0] = 1
	for k := 1; k < 19; k++ {
		p[k] = p[k-1] * 10
	}
	return p
}()

// Phases of a number.
const (
	npStart = iota
	npMinus // after '-'
	npZero  // integer part "0"
	npInt   // integer part of nonzero digits
	npDot   // after '.'
	npFrac  // fraction digits
)

func numFrame(f frame) (ph uint32, neg bool, fd int, m int64) {
	return f.a & 7, f.a&8 != 0, int(f.a >> 4 & 31), int64(uint64(f.b) | uint64(f.c)<<32)
}

func setNum(f frame, ph uint32, neg bool, fd int, m int64) frame {
	f.a = ph | uint32(fd)<<4
	if neg {
		f.a |= 8
	}
	f.b, f.c = uint32(uint64(m)), uint32(uint64(m)>>32)
	return f
}

// step feeds symbol x to a number frame (see strSpec.step).
func (s *numSpec) step(f frame, x sym) (frame, bool, bool) {
	ph, neg, fd, m := numFrame(f)
	digit := x >= '0' && x <= '9'
	d := int64(x) - '0'
	switch ph {
	case npStart, npMinus:
		switch {
		case x == '-' && ph == npStart:
			ph, neg = npMinus, true
		case x == '0':
			ph = npZero
		case digit:
			ph, m = npInt, d
		default:
			return f, false, false
		}
	case npZero, npInt:
		switch {
		case digit && ph == npInt && m <= (maxUnits/pow10[s.frac]-d)/10:
			m = m*10 + d
		case x == '.' && s.frac > 0:
			ph = npDot
		default:
			return f, false, s.canEnd(f)
		}
	case npDot, npFrac:
		switch {
		case digit && fd < int(s.frac):
			ph, fd, m = npFrac, fd+1, m*10+d
		default:
			return f, false, ph == npFrac && s.canEnd(f)
		}
	}
	if !s.live(ph, neg, fd, m) {
		return f, false, false
	}
	return setNum(f, ph, neg, fd, m), true, false
}

// canEnd reports whether the number may end in frame f.
func (s *numSpec) canEnd(f frame) bool {
	ph, neg, fd, m := numFrame(f)
	if ph != npZero && ph != npInt && ph != npFrac {
		return false
	}
	n := m * pow10[int(s.frac)-fd]
	if neg {
		n = -n
	}
	return n >= s.lo && n <= s.hi && n%s.mult == 0
}

// live reports whether a number at this point can still end with a valid
// value: some value it can become lies in the bounds and is a multiple.
func (s *numSpec) live(ph uint32, neg bool, fd int, m int64) bool {
	F := int(s.frac)
	try := func(a, b int64) bool { // magnitudes a..b
		if neg {
			a, b = -b, -a
		}
		return s.hasMultiple(max(a, s.lo), min(b, s.hi))
	}
	switch ph {
	case npMinus:
		return try(0, maxUnits)
	case npZero:
		return try(0, pow10[F]-1)
	case npDot:
		return try(m*pow10[F], m*pow10[F]+pow10[F]-1)
	case npFrac:
		u := pow10[F-fd]
		return try(m*u, m*u+u-1)
	case npInt:
		// k more integer digits: [M*10^(k+F), (M+1)*10^(k+F) - 1].
		for k := 0; k+F < 19; k++ {
			u := pow10[k+F]
			if m > maxUnits/u {
				break
			}
			hi := int64(maxUnits)
			if m+1 <= maxUnits/u {
				hi = (m+1)*u - 1
			}
			if try(m*u, hi) {
				return true
			}
		}
		return false
	}
	return true
}

// hasMultiple reports whether [a, b] holds a multiple of mult.
func (s *numSpec) hasMultiple(a, b int64) bool {
	if a > b {
		return false
	}
	q := b / s.mult
	if b < 0 && b%s.mult != 0 {
		q--
	}
	return q*s.mult >= a
}

// feasible reports whether the number has any valid value.
func (s *numSpec) feasible() bool {
	return s.mult > 0 && s.hasMultiple(max(s.lo, -maxUnits), min(s.hi, maxUnits))
}
