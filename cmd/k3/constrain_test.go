package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/grammartest"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// cliSchema is a bounded schema: a nested object, an enum, an integer
// range, a string with maxLength and a pattern, an array with minItems and
// maxItems.
const cliSchema = `{"type":"object","properties":{
  "name":{"type":"string","maxLength":6,"pattern":"^[a-z]+$"},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "role":{"enum":["admin","user"]},
  "tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":2},
  "zip":{"type":"object","properties":{"code":{"type":"integer","minimum":10000,"maximum":99999}},"required":["code"],"additionalProperties":false}},
 "required":["name","age","role","tags","zip"],"additionalProperties":false}`

// cliRegex is a bounded regular expression.
const cliRegex = `[a-z]{2,8}@[a-z]{2,5}\.(com|org)`

// TestConstrainedRunGenerate: on random weights with the release's
// vocabulary, at temperature 1, every output of k3 run and k3 generate
// under --json-schema validates (with an independent validator) and ends
// on its own, and every output under --regex matches: a continuation,
// a chat's answer, and the prompts of a batch file.
func TestConstrainedRunGenerate(t *testing.T) {
	dir := grammartest.ReleaseModelDir(t)
	schemaFile := writeFile(t, cliSchema)
	val := grammartest.NewValidator(t, cliSchema)
	re := regexp.MustCompile(`^(?:` + cliRegex + `)$`)
	const maxTokens = 200

	check := func(what, text string, ended bool, regex bool) {
		t.Helper()
		switch {
		case !ended:
			t.Errorf("%s: ran out of tokens: %q", what, text)
		case regex && !re.MatchString(text):
			t.Errorf("%s: %q does not match %s", what, text, cliRegex)
		case !regex:
			if err := val.Validate([]byte(text)); err != nil {
				t.Errorf("%s: %q does not validate: %v", what, text, err)
			}
		}
	}
	run := func(args ...string) runJSON {
		t.Helper()
		args = append([]string{"run", "--model", dir, "--temperature", "1", "--max-tokens", strconv.Itoa(maxTokens), "--json"}, args...)
		code, out, stderr := runCmd(t, args...)
		var r runJSON
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("k3 %s: exit %d, %q: %s", strings.Join(args, " "), code, out, stderr)
		}
		return r
	}
	for _, c := range []struct {
		flag, value string
		chat        bool
		seeds       int
	}{
		{"--json-schema", schemaFile, false, 3},
		{"--regex", cliRegex, false, 2},
		{"--json-schema", schemaFile, true, 2},
		{"--regex", cliRegex, true, 1},
	} {
		for seed := 1; seed <= c.seeds; seed++ {
			args := []string{c.flag, c.value, "--seed", strconv.Itoa(seed)}
			if c.chat {
				// Random weights never close the think channel: the
				// answer is what is constrained.
				args = append(args, "--chat", "--thinking=false", "--prompt", "Reply in JSON.")
			} else {
				args = append(args, "--prompt", "JSON:")
			}
			r := run(args...)
			what := fmt.Sprintf("run %s chat=%v seed %d", c.flag, c.chat, seed)
			check(what, r.Text, r.StopReason == "stop", c.flag == "--regex")
		}
	}
	// --json-object: any object; an unbounded one may run out of tokens,
	// but starts as an object and, when it ends, parses as one.
	r := run("--json-object", "--prompt", "{", "--seed", "3", "--max-tokens", "40")
	var obj map[string]any
	if !strings.HasPrefix(r.Text, "{") || (r.StopReason == "stop" && json.Unmarshal([]byte(r.Text), &obj) != nil) {
		t.Errorf("run --json-object: %+v", r)
	}

	// k3 generate: one prompt, and eight prompts of a batch file in
	// shared passes, each with a matcher of its own.
	var lines []string
	for i := range 8 {
		lines = append(lines, fmt.Sprintf("%d,%d,%d", 1000+i, 2000+3*i, 3000+7*i))
	}
	batchFile := writeFile(t, strings.Join(lines, "\n"))
	type result struct {
		GeneratedIDs  []int   `json:"generated_ids"`
		GeneratedText *string `json:"generated_text"`
	}
	for _, c := range []struct{ flag, value string }{{"--json-schema", schemaFile}, {"--regex", cliRegex}} {
		args := []string{"generate", "--model", dir, c.flag, c.value, "--temperature", "1", "--seed", "5",
			"--max-tokens", strconv.Itoa(maxTokens), "--json"}
		code, out, stderr := runCmd(t, append(args, "--ids", "1000,2000")...)
		var one result
		if code != 0 || json.Unmarshal([]byte(out), &one) != nil || one.GeneratedText == nil {
			t.Fatalf("generate %s: exit %d, %q: %s", c.flag, code, out, stderr)
		}
		check("generate "+c.flag, *one.GeneratedText, len(one.GeneratedIDs) < maxTokens, c.flag == "--regex")
		code, out, stderr = runCmd(t, append(args, "--batch-file", batchFile)...)
		var all struct{ Results []result }
		if code != 0 || json.Unmarshal([]byte(out), &all) != nil || len(all.Results) != len(lines) {
			t.Fatalf("generate --batch-file %s: exit %d, %q: %s", c.flag, code, out, stderr)
		}
		for i, r := range all.Results {
			if r.GeneratedText == nil {
				t.Fatalf("generate --batch-file %s: result %d has no text", c.flag, i)
			}
			check(fmt.Sprintf("generate --batch-file %s prompt %d", c.flag, i), *r.GeneratedText, len(r.GeneratedIDs) < maxTokens, c.flag == "--regex")
		}
	}
}

// TestConstraintFlagErrors: a schema the grammar refuses, a bad regular
// expression and conflicting flags are usage errors that name the
// problem, reported before the model is loaded (the --model given does not
// exist); a lenient schema says what it leaves out.
func TestConstraintFlagErrors(t *testing.T) {
	unsupported := writeFile(t, `{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}}`)
	invalid := writeFile(t, `{"type":"objekt"}`)
	notJSON := writeFile(t, `{"type":`)
	noValue := writeFile(t, `{"type":"integer","minimum":5,"maximum":1}`)
	good := writeFile(t, cliSchema)
	missing := filepath.Join(t.TempDir(), "missing.json")
	noModel := t.TempDir() // a directory without a checkpoint: the flags fail before it is opened
	for _, cmd := range [][]string{
		{"run", "--model", noModel, "--prompt", "x"},
		{"run", "--model", noModel, "--prompt", "x", "--chat"},
		{"generate", "--model", noModel, "--ids", "1,2"},
	} {
		for _, c := range []struct {
			args []string
			code int
			want []string
		}{
			{[]string{"--json-schema", unsupported}, cli.ExitUsage, []string{`"uniqueItems"`, "/properties/tags/uniqueItems", "not supported", "--schema-lenient"}},
			{[]string{"--json-schema", invalid}, cli.ExitUsage, []string{`"type"`, "/type", "objekt"}},
			{[]string{"--json-schema", notJSON}, cli.ExitUsage, []string{"not JSON"}},
			{[]string{"--json-schema", noValue}, cli.ExitUsage, []string{"no value"}},
			{[]string{"--json-schema", missing}, cli.ExitUsage, []string{"--json-schema", "missing.json", "does not exist"}},
			{[]string{"--regex", "a("}, cli.ExitUsage, []string{"--regex", "missing closing )"}},
			{[]string{"--regex", ""}, cli.ExitUsage, []string{"empty --regex"}},
			{[]string{"--json-object", "--regex", "a"}, cli.ExitUsage, []string{"give one of"}},
			{[]string{"--json-object", "--json-schema", good}, cli.ExitUsage, []string{"give one of"}},
			{[]string{"--schema-lenient"}, cli.ExitUsage, []string{"--schema-lenient needs --json-schema"}},
			{[]string{"--schema-lenient", "--json-object"}, cli.ExitUsage, []string{"--schema-lenient needs --json-schema"}},
		} {
			args := append(append([]string{}, cmd...), c.args...)
			code, _, stderr := runCmd(t, args...)
			if code != c.code {
				t.Errorf("k3 %s: exit %d, want %d: %s", strings.Join(args, " "), code, c.code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("k3 %s: %q does not say %q", strings.Join(args, " "), stderr, w)
				}
			}
		}
	}
	if code, _, stderr := runCmd(t, "generate", "--model", noModel, "--ids", "1", "--mode", "full", "--json-object"); code != cli.ExitUsage || !strings.Contains(stderr, "no constraint") {
		t.Errorf("generate --mode full --json-object: exit %d: %s", code, stderr)
	}

	// Lenient: the keyword is named on stderr, the rest enforced.
	lenient := writeFile(t, `{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2,"uniqueItems":true}`)
	code, out, stderr := runCmd(t, "run", "--model", testmodel.Dir(t), "--prompt", "x", "--json-schema", lenient, "--schema-lenient",
		"--max-tokens", "30", "--json")
	var r runJSON
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !strings.Contains(stderr, "not enforced: /uniqueItems") {
		t.Fatalf("lenient: exit %d, %q: %s", code, out, stderr)
	}
	var v []bool
	if r.StopReason != "stop" || json.Unmarshal([]byte(r.Text), &v) != nil || len(v) < 1 || len(v) > 2 {
		t.Errorf("lenient: %+v", r)
	}
}

// TestBatchConstrained: k3 batch enforces response_format json_schema and
// json_object and tool_choice required or named, as k3 serve does (it
// runs the same handler); a request whose strict schema cannot be
// enforced gets its 400 while the others succeed.
func TestBatchConstrained(t *testing.T) {
	dir := grammartest.ReleaseModelDir(t)
	tmp := t.TempDir()
	params := `{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`
	tools := `[{"type":"function","function":{"name":"weather","strict":true,"parameters":` + params + `}},
		{"type":"function","function":{"name":"other","strict":true,"parameters":{"type":"object","properties":{"q":{"type":"boolean"}},"required":["q"],"additionalProperties":false}}}]`
	tools = strings.ReplaceAll(tools, "\n\t\t", "")
	body := func(seed int, extra string) string {
		return fmt.Sprintf(`{"messages":[{"role":"user","content":"Answer."}],"thinking":{"type":"disabled"},"temperature":1,"seed":%d,"max_tokens":200,%s}`, seed, extra)
	}
	schemaFormat := func(schema string) string {
		return `"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":` + strings.ReplaceAll(schema, "\n", "") + `}}`
	}
	reqs := map[string]string{
		"schema1":  body(1, schemaFormat(cliSchema)),
		"schema2":  body(2, schemaFormat(cliSchema)),
		"object":   body(3, `"response_format":{"type":"json_object"}`),
		"required": body(4, `"tools":`+tools+`,"tool_choice":"required"`),
		"named":    body(5, `"tools":`+tools+`,"tool_choice":{"type":"function","function":{"name":"weather"}}`),
		"bad":      body(6, schemaFormat(`{"type":"array","items":{"type":"integer"},"uniqueItems":true}`)),
	}
	var in strings.Builder
	for id, b := range reqs {
		fmt.Fprintf(&in, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", id, b)
	}
	input := filepath.Join(tmp, "in.jsonl")
	if err := os.WriteFile(input, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	output := filepath.Join(tmp, "out.jsonl")
	code, _, stderr := runCmd(t, "batch", "--model", dir, "--input", input, "--output", output, "--sessions", "3", "--no-prefix-cache")
	if code != 0 {
		t.Fatalf("k3 batch: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "6 of 6 requests done (6 this run, 1 failed") {
		t.Errorf("summary: %s", stderr)
	}
	raw, err := os.ReadFile(output)
	if err != nil {
		t.Fatal(err)
	}
	schemaVal := grammartest.NewValidator(t, cliSchema)
	paramsVal := grammartest.NewValidator(t, params)
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var line struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int `json:"status_code"`
				Body       struct {
					Choices []struct {
						FinishReason string `json:"finish_reason"`
						Message      struct {
							Content   *string `json:"content"`
							ToolCalls []struct {
								Function struct{ Name, Arguments string }
							} `json:"tool_calls"`
						} `json:"message"`
					} `json:"choices"`
					Error struct {
						Message string `json:"message"`
						Param   string `json:"param"`
					} `json:"error"`
				} `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		seen++
		resp := line.Response
		if line.CustomID == "bad" {
			msg := resp.Body.Error.Message
			if resp.StatusCode != 400 || resp.Body.Error.Param != "response_format" || !strings.Contains(msg, "uniqueItems") || !strings.Contains(msg, "/uniqueItems") {
				t.Errorf("bad schema: %s", l)
			}
			continue
		}
		if resp.StatusCode != 200 || len(resp.Body.Choices) != 1 {
			t.Errorf("%s: %s", line.CustomID, l)
			continue
		}
		ch := resp.Body.Choices[0]
		content := ""
		if ch.Message.Content != nil {
			content = *ch.Message.Content
		}
		switch line.CustomID {
		case "schema1", "schema2":
			if err := schemaVal.Validate([]byte(content)); ch.FinishReason != "stop" || err != nil {
				t.Errorf("%s: finish %q, %q: %v", line.CustomID, ch.FinishReason, content, err)
			}
		case "object":
			var obj map[string]any
			if !strings.HasPrefix(strings.TrimSpace(content), "{") || (ch.FinishReason == "stop" && json.Unmarshal([]byte(content), &obj) != nil) {
				t.Errorf("object: finish %q, %q", ch.FinishReason, content)
			}
		case "required", "named":
			calls := ch.Message.ToolCalls
			if ch.FinishReason != "tool_calls" || len(calls) == 0 {
				t.Errorf("%s: finish %q, no call: %s", line.CustomID, ch.FinishReason, l)
				continue
			}
			for _, c := range calls {
				switch {
				case line.CustomID == "named" && c.Function.Name != "weather":
					t.Errorf("named: called %q", c.Function.Name)
				case c.Function.Name == "weather":
					if err := paramsVal.Validate([]byte(c.Function.Arguments)); err != nil {
						t.Errorf("%s: arguments %q: %v", line.CustomID, c.Function.Arguments, err)
					}
				case c.Function.Name != "other":
					t.Errorf("%s: called %q", line.CustomID, c.Function.Name)
				}
			}
			if line.CustomID == "named" && len(calls) != 1 {
				t.Errorf("named: %d calls", len(calls))
			}
		}
	}
	if seen != len(reqs) {
		t.Errorf("%d result lines, want %d", seen, len(reqs))
	}
}
