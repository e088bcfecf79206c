// Package automaton builds the byte automata of package grammar: regular
// expressions (Go's regexp/syntax, matched as UTF-8) turned into
// deterministic automata over bytes, their products, the automata of
// fixed lexemes and of JSON Schema's formats and patterns, and the length
// tables (lenses) that bound how many characters an accepted text may
// still have. It imports the standard library only and knows nothing of
// grammars, vocabularies or tokens.
package automaton
