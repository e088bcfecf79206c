package server

import (
	"strings"
	"testing"
)

// TestStopper: whatever the pieces the content comes in, the text
// released is the content up to the first stop sequence (the earliest in
// the text, whichever is listed first), and nothing after it.
func TestStopper(t *testing.T) {
	for _, c := range []struct {
		content string
		stops   []string
		want    string
		hit     string
	}{
		{"hello world", nil, "hello world", ""},
		{"hello world", []string{"wor"}, "hello ", "wor"},
		{"hello world", []string{"xyz"}, "hello world", ""},
		{"hello world", []string{"world", "lo w"}, "hel", "lo w"},
		{"aaab", []string{"aab"}, "a", "aab"},
		{"the end is near", []string{"near", "end"}, "the ", "end"},
		{"ends with a prefix: ab", []string{"abc"}, "ends with a prefix: ab", ""},
		{"héllo wörld", []string{"wö"}, "héllo ", "wö"},
	} {
		for size := 1; size <= len(c.content); size++ {
			st := stopper{stops: c.stops}
			var out strings.Builder
			stopped := false
			for i := 0; i < len(c.content) && !stopped; i += size {
				var s string
				s, stopped = st.write(c.content[i:min(i+size, len(c.content))])
				out.WriteString(s)
			}
			if !stopped {
				out.WriteString(st.flush())
			}
			if out.String() != c.want || st.hit != c.hit || stopped != (c.hit != "") {
				t.Errorf("%q stops %q in pieces of %d: %q (hit %q, stopped %v), want %q (hit %q)", c.content, c.stops, size, out.String(), st.hit, stopped, c.want, c.hit)
			}
		}
	}
}
