// Package jsonschema parses and checks the JSON Schema documents of
// package grammar: it reads the document (keeping the order of keys),
// resolves references, refuses or notes the keywords that cannot be
// enforced, and turns each schema into a Node, an intermediate form by
// type (object, array, string, number, ...) that package grammar lowers
// into its program. It also validates values against a Node, which
// filters enum values. It imports package automaton (patterns and
// formats) and the standard library only.
package jsonschema
