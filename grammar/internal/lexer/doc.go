// Package lexer holds the leaf lexers of package grammar, the parts of a
// grammar that read bytes one at a time with a small state: JSON (or
// raw) strings, whose content an automaton and length bounds constrain,
// and numbers without exponent checked digit by digit against bounds and
// a multiple. Package grammar keeps their states in its frames. It
// imports package automaton and the standard library only.
package lexer
