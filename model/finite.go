package model

import (
	"errors"
	"fmt"
)

// ErrNonFinite reports a NaN or an infinity in a pass's activations: a
// corrupt matrix (matrices are not scanned at load), a corrupt saved state
// or an overflow. The pass fails rather than route on, or return, garbage.
var ErrNonFinite = errors.New("non-finite values")

// allFinite reports whether v holds no NaN and no infinity. x·0 is 0 for
// every finite x and NaN otherwise, so one sum with no branch per element
// decides; four sums keep the adds independent.
func allFinite(v []float32) bool {
	var a, b, c, d float32
	i := 0
	for ; i+4 <= len(v); i += 4 {
		a += v[i] * 0
		b += v[i+1] * 0
		c += v[i+2] * 0
		d += v[i+3] * 0
	}
	for ; i < len(v); i++ {
		a += v[i] * 0
	}
	return a+b+c+d == 0
}

// checkFinite returns nil when the op's output rows (row-major, width
// values each) are finite, else ErrNonFinite naming the op and the first
// bad row and value. It runs once per op result, never inside a kernel.
func checkFinite(v []float32, width int, op string) error {
	if allFinite(v) {
		return nil
	}
	for i, x := range v {
		if x-x != 0 {
			return fmt.Errorf("%w: %s: row %d, value %d is %v", ErrNonFinite, op, i/width, i%width, x)
		}
	}
	return nil
}

// PartialError reports a pass in which some sequences failed with a
// non-finite value (their Group.Err is set) while the others completed
// normally. It unwraps to the first failure.
type PartialError struct {
	Failed, Of int
	First      error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("%d of the pass's %d sequences failed: %v", e.Failed, e.Of, e.First)
}

func (e *PartialError) Unwrap() error { return e.First }

// partialError returns a *PartialError if any group failed, else nil.
func partialError(gs []Group) error {
	var pe *PartialError
	for i := range gs {
		if gs[i].Err != nil {
			if pe == nil {
				pe = &PartialError{Of: len(gs), First: gs[i].Err}
			}
			pe.Failed++
		}
	}
	if pe == nil {
		return nil
	}
	return pe
}

// errPassFailed stops a sub-pass whose every sequence has failed (each
// Group.Err says why): nothing is left to compute.
var errPassFailed = errors.New("every sequence of the pass failed")

// failGroup fails the group of row r of the current tile with err,
// unless it failed already (the first error is kept).
func (p *pass) failGroup(r int, err error) { p.failRow(p.r0+r, err) }

// failRow fails the group of row r of the pass with err, unless it failed
// already (the first error is kept).
func (p *pass) failRow(r int, err error) {
	for i := range p.all {
		sg := &p.all[i]
		if r < sg.lo+sg.n {
			if g := &p.gs[sg.grp]; g.Err == nil {
				g.Err = err
			}
			return
		}
	}
}

// allFailed returns errPassFailed when every group of the sub-pass has
// failed, else nil.
func (p *pass) allFailed() error {
	if p.gs == nil {
		return nil
	}
	for i := range p.all {
		if p.gs[p.all[i].grp].Err == nil {
			return nil
		}
	}
	return errPassFailed
}

// opError describes a non-finite value x found in op's output.
func (p *pass) opError(op string, x float32) error {
	if p.l < 0 {
		return fmt.Errorf("%w: %s: %v", ErrNonFinite, op, x)
	}
	return fmt.Errorf("layer %d: %w: %s: %v", p.l, ErrNonFinite, op, x)
}

// screen checks an op's output for the rows of the current tile (width
// values each): rows holding a NaN or an infinity fail their sequence's
// group and are zeroed, so that the shared products of the rest of the
// pass stay finite (rows never mix). Without groups (a bare pass), the
// first bad value fails the pass. One check per op result, never inside a
// kernel.
func (p *pass) screen(v []float32, width int, op string) error {
	if allFinite(v) {
		return nil
	}
	if p.gs == nil {
		return checkFinite(v, width, op)
	}
	for r := 0; (r+1)*width <= len(v); r++ {
		if row := v[r*width : (r+1)*width]; !allFinite(row) {
			p.failGroup(r, p.opError(op, firstNonFinite(row)))
			clear(row)
		}
	}
	return p.allFailed()
}

// screenLogits checks the logits of a tile of selected rows, width columns
// of the vocabulary each.
func (p *pass) screenLogits(v []float32, width int, tile []pick) error {
	if allFinite(v) {
		return nil
	}
	if p.gs == nil {
		return checkFinite(v, width, "lm_head")
	}
	for i, pk := range tile {
		if row := v[i*width : (i+1)*width]; !allFinite(row) {
			p.failRow(pk.r, p.opError("lm_head", firstNonFinite(row)))
		}
	}
	return p.allFailed()
}

// firstNonFinite returns the first NaN or infinity of v (0 if none).
func firstNonFinite(v []float32) float32 {
	for _, x := range v {
		if x-x != 0 {
			return x
		}
	}
	return 0
}
