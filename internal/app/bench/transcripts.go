package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/tokenizer"
)

// transcript is an agent transcript in the agent-traces schema
// (shared/fixtures/agent-traces/README.md), rendered in Kimi K3's chat
// format and tokenized: ids is the whole conversation, and each turn
// ids[start:end] one assistant turn, what the model is made to produce
// (after the turn's `<|open|>message role="assistant"<|sep|>`); the prompt
// of a turn is everything before it.
type transcript struct {
	name  string
	ids   []int
	turns [][2]int
}

// traceFile is the agent-traces schema.
type traceFile struct {
	Turns []struct {
		Role      string `json:"role"`
		Text      string `json:"text"`
		Content   string `json:"content"`
		Reasoning string `json:"reasoning"`
		ToolCalls []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
		Name       string `json:"name"`
	} `json:"turns"`
}

// loadTranscripts reads path (one transcript, or a directory of them:
// every .json file, in name order) and tokenizes each with tok.
func loadTranscripts(path string, tok *tokenizer.Tokenizer) ([]transcript, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if st.IsDir() {
		files, err = filepath.Glob(filepath.Join(path, "*.json"))
		if err != nil {
			return nil, err
		}
		slices.Sort(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no .json transcripts", path)
		}
	}
	var out []transcript
	for _, f := range files {
		tr, err := loadTranscript(f, tok)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if len(tr.turns) > 0 {
			out = append(out, tr)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no assistant turns", path)
	}
	return out, nil
}

func loadTranscript(path string, tok *tokenizer.Tokenizer) (transcript, error) {
	tr := transcript{name: strings.TrimSuffix(filepath.Base(path), ".json")}
	raw, err := os.ReadFile(path)
	if err != nil {
		return tr, err
	}
	var tf traceFile
	if err := json.Unmarshal(raw, &tf); err != nil {
		return tr, fmt.Errorf("not an agent transcript: %w", err)
	}
	// The conversation as K3 would see it: tool calls as calls (their
	// arguments in K3's argument tags), reasoning in the think channel.
	// Where the chat format cannot take a turn as structured (arguments
	// that are not a JSON object, say), its text as the transcript
	// rendered it stands in for the whole turn.
	msgs := make([]chat.Message, 0, len(tf.Turns))
	plain := make([]chat.Message, 0, len(tf.Turns))
	for _, t := range tf.Turns {
		m := chat.Message{Role: t.Role}
		p := chat.Message{Role: t.Role, Content: t.Text}
		switch t.Role {
		case chat.RoleSystem, chat.RoleUser:
			m.Content = t.Text
		case chat.RoleAssistant:
			m.Content, m.ReasoningContent = t.Content, t.Reasoning
			for _, c := range t.ToolCalls {
				args := string(c.Arguments)
				var s string
				if json.Unmarshal(c.Arguments, &s) == nil {
					args = s
				}
				m.ToolCalls = append(m.ToolCalls, chat.ToolCall{Type: "function", Function: chat.FunctionCall{Name: c.Name, Arguments: args}})
			}
			if len(m.ToolCalls) == 0 && m.Content == "" && m.ReasoningContent == "" {
				m.Content = t.Text
			}
		case chat.RoleTool:
			m.Content, m.ToolCallID, m.Tool = t.Text, t.ToolCallID, t.Name
			p.ToolCallID, p.Tool = t.ToolCallID, t.Name
		default:
			continue
		}
		msgs = append(msgs, m)
		plain = append(plain, p)
	}
	opts := chat.Options{NoGenerationPrompt: true}
	segs, starts, err := renderStarts(msgs, opts)
	if err != nil {
		if segs, starts, err = renderStarts(plain, opts); err != nil {
			return tr, err
		}
	}
	for i, m := range msgs {
		from := len(tr.ids)
		ids, err := chat.Encode(tok, segs[starts[i]:starts[i+1]])
		if err != nil {
			return tr, err
		}
		tr.ids = append(tr.ids, ids...)
		if m.Role != chat.RoleAssistant || starts[i] == starts[i+1] {
			continue
		}
		// The reply starts after the message's opening tag.
		head := 0
		for k, s := range segs[starts[i]:starts[i+1]] {
			if s.Special && s.Text == chat.TokSep {
				h, err := chat.Encode(tok, segs[starts[i]:starts[i]+k+1])
				if err != nil {
					return tr, err
				}
				head = len(h)
				break
			}
		}
		if from+head < len(tr.ids) {
			tr.turns = append(tr.turns, [2]int{from + head, len(tr.ids)})
		}
	}
	return tr, nil
}

// renderStarts renders msgs and returns the segments and where each
// message starts (tool results rendered together share a start; the
// message after them starts where they end).
func renderStarts(msgs []chat.Message, opts chat.Options) ([]chat.Segment, []int, error) {
	starts := make([]int, len(msgs)+1)
	segs, err := chat.Render(msgs, opts)
	if err != nil {
		return nil, nil, err
	}
	starts[len(msgs)] = len(segs)
	for i := len(msgs) - 1; i >= 0; i-- {
		rest, err := chat.RenderFrom(msgs, i, opts)
		if err != nil {
			return nil, nil, err
		}
		starts[i] = len(segs) - len(rest)
	}
	// Consecutive tool results render as one block from the first one's
	// start: give the block to the first, nothing to the others.
	for i := 0; i < len(msgs); i++ {
		if msgs[i].Role == chat.RoleTool {
			j := i
			for j < len(msgs) && msgs[j].Role == chat.RoleTool {
				j++
			}
			for k := i + 1; k < j; k++ {
				starts[k] = starts[j]
			}
			i = j - 1
		}
	}
	return segs, starts, nil
}

// remap renumbers every transcript's ids densely in order of first
// appearance, so that a checkpoint with a smaller vocabulary (a synthetic
// one) is fed the same text structure: equal tokens stay equal and
// different ones differ, as long as the transcripts use at most vocab
// distinct ids (beyond that, ids are folded modulo vocab; folded reports
// how many were). The drafts and their acceptance are the same as with
// the tokenizer's own ids.
func remap(trs []transcript, vocab int) (distinct, folded int) {
	m := map[int]int{}
	for i := range trs {
		for k, id := range trs[i].ids {
			n, ok := m[id]
			if !ok {
				n = len(m)
				m[id] = n
				if n >= vocab {
					folded++
				}
			}
			trs[i].ids[k] = n % vocab
		}
	}
	return len(m), folded
}
