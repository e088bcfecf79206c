package lexer

// Number is a JSON number without exponent whose value, counted in units
// of 10^-Frac, is an integer N with Lo <= N <= Hi and N a multiple of
// Mult. Frac 0 makes it an integer.
type Number struct {
	Frac   uint8
	Lo, Hi int64
	Mult   int64
}

// NumState is where a number is: its phase, its sign, the number of
// fraction digits read and the digits read so far, as one integer M.
type NumState struct {
	Ph  uint32
	Neg bool
	FD  int
	M   int64
}

// MaxUnits bounds the magnitude of a number, in units: 18 digits.
const MaxUnits = 999_999_999_999_999_999

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

// Step feeds symbol x to a number in state st. It returns the new state
// and whether x was taken; done means the number is complete and x
// belongs to what follows.
func (s *Number) Step(st NumState, x uint16) (NumState, bool, bool) {
	ph, neg, fd, m := st.Ph, st.Neg, st.FD, st.M
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
			return st, false, false
		}
	case npZero, npInt:
		switch {
		case digit && ph == npInt && m <= (MaxUnits/pow10[s.Frac]-d)/10:
			m = m*10 + d
		case x == '.' && s.Frac > 0:
			ph = npDot
		default:
			return st, false, s.CanEnd(st)
		}
	case npDot, npFrac:
		switch {
		case digit && fd < int(s.Frac):
			ph, fd, m = npFrac, fd+1, m*10+d
		default:
			return st, false, ph == npFrac && s.CanEnd(st)
		}
	}
	if !s.Live(ph, neg, fd, m) {
		return st, false, false
	}
	return NumState{ph, neg, fd, m}, true, false
}

// CanEnd reports whether the number may end in state st.
func (s *Number) CanEnd(st NumState) bool {
	ph, neg, fd, m := st.Ph, st.Neg, st.FD, st.M
	if ph != npZero && ph != npInt && ph != npFrac {
		return false
	}
	n := m * pow10[int(s.Frac)-fd]
	if neg {
		n = -n
	}
	return n >= s.Lo && n <= s.Hi && n%s.Mult == 0
}

// live reports whether a number at this point can still end with a valid
// value: some value it can become lies in the bounds and is a multiple.
func (s *Number) Live(ph uint32, neg bool, fd int, m int64) bool {
	F := int(s.Frac)
	try := func(a, b int64) bool { // magnitudes a..b
		if neg {
			a, b = -b, -a
		}
		return s.hasMultiple(max(a, s.Lo), min(b, s.Hi))
	}
	switch ph {
	case npMinus:
		return try(0, MaxUnits)
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
			if m > MaxUnits/u {
				break
			}
			hi := int64(MaxUnits)
			if m+1 <= MaxUnits/u {
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
func (s *Number) hasMultiple(a, b int64) bool {
	if a > b {
		return false
	}
	q := b / s.Mult
	if b < 0 && b%s.Mult != 0 {
		q--
	}
	return q*s.Mult >= a
}

// feasible reports whether the number has any valid value.
func (s *Number) Feasible() bool {
	return s.Mult > 0 && s.hasMultiple(max(s.Lo, -MaxUnits), min(s.Hi, MaxUnits))
}
