package grammar

// WithoutClasses turns the token classes off until restore is called, so
// that a benchmark can measure masks by walking the trie alone.
func WithoutClasses() (restore func()) {
	noClasses = true
	return func() { noClasses = false }
}
