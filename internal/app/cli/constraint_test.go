package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3go/k3/chat"
)

// parseConstraint parses args with the constraint flags and checks them.
func parseConstraint(t *testing.T, args ...string) (*ConstraintFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c ConstraintFlags
	c.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c, c.Check()
}

// TestConstraintFlagsResponseFormat: --json-schema is a json_schema
// response format carrying the file's schema and name, strict unless
// --schema-lenient, which the chat package then enforces as far as it
// can; --json-object is json_object; --regex and no flag are none.
func TestConstraintFlagsResponseFormat(t *testing.T) {
	schema := `{"type":"array","items":{"type":"boolean"},"maxItems":2,"uniqueItems":true}`
	file := filepath.Join(t.TempDir(), "flags.schema.json")
	if err := os.WriteFile(file, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseConstraint(t, "--json-schema", file); err == nil || !strings.Contains(err.Error(), "uniqueItems") {
		t.Fatalf("strict: %v, want an error naming uniqueItems", err)
	}
	c, err := parseConstraint(t, "--json-schema", file, "--schema-lenient")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Ignored()) != 1 || !strings.Contains(c.Ignored()[0], "uniqueItems") {
		t.Errorf("ignored: %q", c.Ignored())
	}
	rf := c.ResponseFormat()
	var js struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if rf == nil || rf.Type != "json_schema" || json.Unmarshal(rf.JSONSchema, &js) != nil {
		t.Fatalf("response format %+v", rf)
	}
	if js.Name != "flags.schema" || string(js.Schema) != schema || js.Strict == nil || *js.Strict {
		t.Errorf("json_schema %s", rf.JSONSchema)
	}
	if g, err := chat.AnswerGrammar(nil, chat.Options{ResponseFormat: rf}, chat.ConstrainOptions{}); err != nil || g == nil {
		t.Errorf("the lenient format is not enforced: %v", err)
	}

	if c, err := parseConstraint(t, "--json-object"); err != nil || c.ResponseFormat() == nil || c.ResponseFormat().Type != "json_object" || !c.Set() {
		t.Errorf("--json-object: %v", err)
	}
	c, err = parseConstraint(t, "--regex", "[ab]+")
	if _, isRe := c.Regexp(); err != nil || c.ResponseFormat() != nil || !isRe || !c.Set() {
		t.Errorf("--regex: %v", err)
	}
	c, err = parseConstraint(t)
	if _, isRe := c.Regexp(); err != nil || c.Set() || c.ResponseFormat() != nil || isRe || c.g != nil {
		t.Errorf("no flag: %v", err)
	}
	var ue *UsageError
	if _, err := parseConstraint(t, "--regex", "[", "--json-object"); !errors.As(err, &ue) {
		t.Errorf("two constraints: %v", err)
	}
}
