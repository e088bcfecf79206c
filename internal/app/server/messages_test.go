package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/k3go/k3/chat"
)

func anthropicClient(url string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(url), option.WithAPIKey("unused"), option.WithMaxRetries(0)}, opts...)...)
}

// weatherMessage is turn 1 of the tool conversation in the Messages API.
func weatherMessage() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "k3-test",
		MaxTokens: 400, // the tiny vocabulary spells the call in ~150 tokens
		System:    []anthropic.TextBlockParam{{Text: "You are a weather bot."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Paris?"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: param.NewOpt("Get the weather"),
			InputSchema: anthropic.ToolInputSchemaParam{Required: []string{"city"},
				Properties: map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}}}}},
		Thinking: anthropic.ThinkingConfigParamOfEnabled(8000),
	}
}

// checkReply1 checks the reply to turn 1: thinking, text and tool_use
// blocks, stop_reason tool_use, usage. It returns the tool_use block.
func checkReply1(t *testing.T, m *anthropic.Message) anthropic.ToolUseBlock {
	t.Helper()
	if m.StopReason != anthropic.StopReasonToolUse || len(m.Content) != 3 || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") {
		t.Fatalf("turn 1: %s", m.RawJSON())
	}
	if th := m.Content[0].AsThinking(); m.Content[0].Type != "thinking" || th.Thinking != "I should look it up." || th.Signature == "" {
		t.Errorf("thinking block %s", m.Content[0].RawJSON())
	}
	if m.Content[1].Type != "text" || m.Content[1].AsText().Text != "Checking." {
		t.Errorf("text block %s", m.Content[1].RawJSON())
	}
	use := m.Content[2].AsToolUse()
	var input map[string]any
	if m.Content[2].Type != "tool_use" || use.Name != "get_weather" || use.ID == "" || json.Unmarshal(use.Input, &input) != nil ||
		!reflect.DeepEqual(input, map[string]any{"city": "Paris", "days": 2.0}) {
		t.Errorf("tool_use block %s", m.Content[2].RawJSON())
	}
	if m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 || !m.Usage.JSON.CacheReadInputTokens.Valid() {
		t.Errorf("usage %s", m.Usage.RawJSON())
	}
	return use
}

// TestAnthropicClient: the official Anthropic client runs the two-turn
// tool conversation, not streamed and streamed, the stream put together
// by the client's own accumulator; turn 2 gives the reply back (its
// thinking block too) with the tool's result. Both turn 2 prompts are the
// same, and count_tokens counts turn 1's prompt.
func TestAnthropicClient(t *testing.T) {
	s, ts, log := newScripted(t, Options{}, weatherAnswer)
	c := anthropicClient(ts.URL)
	ctx := context.Background()
	p := weatherMessage()
	m1, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	use := checkReply1(t, m1)
	first := log.last(t, 1)[0]
	if int(m1.Usage.InputTokens) != countedLen(t, s, first) || !strings.Contains(log.text(t, -1), "`thinking_effort=high`") {
		t.Errorf("input_tokens %d, prompt %d tokens: %q", m1.Usage.InputTokens, len(first), log.text(t, -1))
	}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: p.Model, System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System},
		Messages: p.Messages, Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: p.Tools[0].OfTool}}, Thinking: p.Thinking})
	if err != nil || int(n.InputTokens) != countedLen(t, s, first) {
		t.Errorf("count_tokens %+v (%v), want %d", n, err, countedLen(t, s, first))
	}

	p.Messages = append(p.Messages, m1.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "18 C and sunny", false)))
	m2, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if m2.StopReason != anthropic.StopReasonEndTurn || len(m2.Content) != 2 || m2.Content[1].AsText().Text != "It is sunny." {
		t.Errorf("turn 2: %s", m2.RawJSON())
	}
	second := log.last(t, 1)[0]
	if p2 := log.text(t, -1); !strings.Contains(p2, "<|open|>think<|sep|>I should look it up.<|close|>think<|sep|><|open|>response<|sep|>Checking.") ||
		!strings.Contains(p2, "<|open|>message role=\"tool\" tool=\"get_weather\" index=\"1\"<|sep|>18 C and sunny") {
		t.Errorf("turn 2 prompt %q", p2)
	}

	// Streamed, accumulated by the client.
	p = weatherMessage()
	acc := streamMessage(t, c, p)
	use = checkReply1(t, acc)
	p.Messages = append(p.Messages, acc.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "18 C and sunny", false)))
	acc2 := streamMessage(t, c, p)
	if acc2.StopReason != anthropic.StopReasonEndTurn || acc2.Content[len(acc2.Content)-1].AsText().Text != "It is sunny." {
		t.Errorf("streamed turn 2: %s", acc2.RawJSON())
	}
	if !slices.Equal(log.last(t, 1)[0], second) {
		t.Errorf("streamed turn 2 renders\n%q\nnot streamed\n%q", log.text(t, -1), log.text(t, -3))
	}
}

// streamMessage runs a streamed request through the client's accumulator
// and checks the event order.
func streamMessage(t *testing.T, c anthropic.Client, p anthropic.MessageNewParams, opts ...option.RequestOption) *anthropic.Message {
	t.Helper()
	stream := c.Messages.NewStreaming(context.Background(), p, opts...)
	var acc anthropic.Message
	var types []string
	open := -1
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatalf("the accumulator refuses %s: %v", ev.RawJSON(), err)
		}
		switch ev.Type {
		case "content_block_start":
			if open >= 0 {
				t.Errorf("block %d starts while %d is open", ev.Index, open)
			}
			open = int(ev.Index)
		case "content_block_delta":
			if int(ev.Index) != open {
				t.Errorf("a delta for block %d while %d is open", ev.Index, open)
			}
		case "content_block_stop":
			open = -1
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// (The client drops the ping that follows message_start.)
	if len(types) < 4 || types[0] != "message_start" || types[len(types)-2] != "message_delta" || types[len(types)-1] != "message_stop" {
		t.Errorf("events %q", types)
	}
	return &acc
}

// TestAnthropicClientDetails: stop sequences, max_tokens, thinking
// display omitted (the signature alone carries the thinking back), the
// API key as x-api-key, and errors in Anthropic's shape.
func TestAnthropicClientDetails(t *testing.T) {
	_, ts, log := newScripted(t, Options{APIKey: "sekret"}, func(p string) *chat.Message {
		if strings.Contains(p, "Count") {
			return &chat.Message{ReasoningContent: "Easy.", Content: "one two three four"}
		}
		return weatherAnswer(p)
	})
	c := anthropicClient(ts.URL, option.WithAPIKey("sekret"))
	ctx := context.Background()
	count := anthropic.MessageNewParams{Model: "k3-test", MaxTokens: 400, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Count"))}}
	m, err := c.Messages.New(ctx, count)
	if err != nil {
		t.Fatal(err)
	}
	if m.StopReason != anthropic.StopReasonEndTurn || len(m.Content) != 1 || m.Content[0].AsText().Text != "one two three four" {
		t.Errorf("no thinking asked: %s", m.RawJSON())
	}
	count.StopSequences = []string{"three", "hree f"}
	for _, stream := range []bool{false, true} {
		var m *anthropic.Message
		if stream {
			m = streamMessage(t, c, count)
		} else if m, err = c.Messages.New(ctx, count); err != nil {
			t.Fatal(err)
		}
		if m.StopReason != anthropic.StopReasonStopSequence || m.StopSequence != "three" || m.Content[0].AsText().Text != "one two " {
			t.Errorf("stop sequence (stream %v): %s", stream, m.RawJSON())
		}
	}
	count.StopSequences = nil
	count.MaxTokens = 3
	if m, err = c.Messages.New(ctx, count); err != nil || m.StopReason != anthropic.StopReasonMaxTokens || m.Usage.OutputTokens != 3 {
		t.Errorf("max_tokens: %v %s", err, m.RawJSON())
	}

	p := weatherMessage()
	p.Thinking = anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{Display: "omitted"}}
	p.OutputConfig = anthropic.OutputConfigParam{Effort: anthropic.OutputConfigEffortLow}
	acc := streamMessage(t, c, p)
	if th := acc.Content[0].AsThinking(); acc.Content[0].Type != "thinking" || th.Thinking != "" || th.Signature == "" {
		t.Errorf("omitted thinking %s", acc.Content[0].RawJSON())
	}
	if !strings.Contains(log.text(t, -1), "`thinking_effort=low`") {
		t.Errorf("effort low: %q", log.text(t, -1))
	}
	use := acc.Content[len(acc.Content)-1].AsToolUse()
	p.Messages = append(p.Messages, acc.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "18 C and sunny", false)))
	if _, err := c.Messages.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.text(t, -1), "<|open|>think<|sep|>I should look it up.<|close|>think<|sep|>") {
		t.Errorf("the omitted thinking did not come back: %q", log.text(t, -1))
	}

	models, err := c.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "k3-test" || models.Data[0].MaxInputTokens != 4096 || models.Data[0].CreatedAt.IsZero() {
		t.Errorf("models.list: %v %+v", err, models)
	}
	if info, err := c.Models.Get(ctx, "k3-test", anthropic.ModelGetParams{}); err != nil || info.DisplayName != "k3-test" {
		t.Errorf("models.get: %v %+v", err, info)
	}

	var e *anthropic.Error
	bad := anthropicClient(ts.URL, option.WithAPIKey("wrong"))
	_, err = bad.Messages.New(ctx, count)
	if !errors.As(err, &e) || e.StatusCode != http.StatusUnauthorized || !strings.Contains(e.RawJSON(), `"authentication_error"`) {
		t.Errorf("wrong key: %v", err)
	}
	p.Messages = p.Messages[:1]
	p.Model = "claude-opus-4"
	_, err = c.Messages.New(ctx, p)
	if !errors.As(err, &e) || e.StatusCode != http.StatusNotFound || !strings.Contains(e.RawJSON(), `"not_found_error"`) {
		t.Errorf("unknown model: %v", err)
	}
}
