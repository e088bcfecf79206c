package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/cli"
)

const templateUsage = `--tokenizer DIR [--input FILE] [--json] [--defaults]
       k3 template --parse --tokenizer DIR [--ids 1,2,3 | --input FILE] [--json] [--thinking=false]

Renders a conversation in Kimi K3's chat format (XTML), as the release's
encoder does. The input (--input, or stdin) is {"messages": [...],
"tools": ..., "kwargs": {...}}: OpenAI-style messages, the tool list, and
options such as thinking, thinking_effort, tool_choice, response_format and
add_generation_prompt. It prints the rendered text, or with --json
{"text", "segments": [[text, is_special], ...], "ids"}. The effort message
is added only when kwargs name an effort, as the encoder does; --defaults
adds thinking_effort=max when thinking is on, as the release's
apply_chat_template does.

With --parse it reads the ids a model generated after such a prompt (--ids,
or --input/stdin) and prints the answer: reasoning, content and tool calls,
or with --json {"reasoning_content", "content", "tool_calls": [{"name",
"arguments"}]} with arguments as an object. --thinking=false reads an
answer to a prompt without thinking (it starts in the response channel).
--tokenizer defaults to --model.`

func runTemplate(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("template", templateUsage, stderr)
	var tf tokenizerFlags
	tf.register(fs)
	input := fs.String("input", "", "read the conversation (or with --parse the ids) from `FILE` (default: stdin)")
	asJSON := fs.Bool("json", false, "print JSON")
	defaults := fs.Bool("defaults", false, "fill in the defaults of the release's apply_chat_template (thinking_effort=max)")
	parseMode := fs.Bool("parse", false, "parse a model's answer instead of rendering")
	idsFlag := fs.String("ids", "", "with --parse, the answer's token `ids`, comma separated")
	thinking := fs.Bool("thinking", true, "with --parse, the answer starts in the think channel")
	cli.InputFiles(fs, "input")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	idsSet := synthFlagSet(fs, "ids")
	if !*parseMode {
		for _, f := range []string{"ids", "thinking"} {
			if synthFlagSet(fs, f) {
				return cli.Usagef("--%s needs --parse", f)
			}
		}
	} else if *defaults {
		return cli.Usagef("--defaults is for rendering, not --parse")
	}
	if idsSet && *input != "" {
		return cli.Usagef("give --ids or --input, not both")
	}
	tok, err := tf.load()
	if err != nil {
		return err
	}
	if *parseMode {
		in := []byte(*idsFlag)
		if !idsSet {
			if in, err = readInput(*input, stdin); err != nil {
				return err
			}
		}
		ids, err := parseIDList(in)
		if err != nil {
			if idsSet {
				return cli.Usagef("--ids %q: %v", *idsFlag, err)
			}
			return err
		}
		for k, id := range ids {
			if _, ok := tok.TokenBytes(id); !ok {
				return cli.Usagef("id %d at index %d is not in the tokenizer", id, k)
			}
		}
		m, err := chat.Parse(tok, ids, *thinking)
		if err != nil {
			return chatError(err)
		}
		return printAnswer(stdout, m, *asJSON)
	}
	raw, err := readInput(*input, stdin)
	if err != nil {
		return err
	}
	var req chat.Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return cli.Usagef("input is not a conversation {\"messages\", \"tools\", \"kwargs\"}: %v", err)
	}
	opts := req.Options
	if *defaults {
		opts = opts.WithDefaults()
	}
	segs, err := chat.Render(req.Messages, opts)
	if err != nil {
		return chatError(err)
	}
	ids, err := chat.Encode(tok, segs)
	if err != nil {
		return chatError(err)
	}
	text := chat.Text(segs)
	if !*asJSON {
		_, err := io.WriteString(stdout, text+"\n")
		return err
	}
	if segs == nil {
		segs = []chat.Segment{}
	}
	if ids == nil {
		ids = []int{}
	}
	return json.NewEncoder(stdout).Encode(struct {
		Text     string         `json:"text"`
		Segments []chat.Segment `json:"segments"`
		IDs      []int          `json:"ids"`
	}{text, segs, ids})
}

// chatError drops the package prefix (the command names itself); a
// conversation the format cannot express is a usage error.
func chatError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "chat: ")
	if errors.Is(err, chat.ErrFormat) {
		return cli.Usagef("%s", msg)
	}
	return errors.New(msg)
}

func printAnswer(w io.Writer, m chat.Message, asJSON bool) error {
	if asJSON {
		type call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		out := struct {
			Reasoning string `json:"reasoning_content"`
			Content   string `json:"content"`
			ToolCalls []call `json:"tool_calls"`
		}{m.ReasoningContent, m.Content, []call{}}
		for _, c := range m.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, call{c.Function.Name, json.RawMessage(c.Function.Arguments)})
		}
		return json.NewEncoder(w).Encode(out)
	}
	var b strings.Builder
	if m.ReasoningContent != "" {
		fmt.Fprintf(&b, "reasoning: %s\n", m.ReasoningContent)
	}
	fmt.Fprintf(&b, "content: %s\n", m.Content)
	for _, c := range m.ToolCalls {
		fmt.Fprintf(&b, "tool call: %s %s\n", c.Function.Name, c.Function.Arguments)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
