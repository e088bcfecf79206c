package server

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/k3go/k3/chat"
)

// TestOpenAIClientTools drives the server with the official Go client: a
// chat with tools gets a tool call back (the random test model is made to
// emit one through the script hook; rendering, parsing and the API are the
// real ones), the tool's result goes back, and the model answers. Streamed,
// the call arrives as OpenAI deltas that the client's accumulator puts
// together; tool_choice and reasoning_effort reach the
// prompt as the release renders them.
func TestOpenAIClientTools(t *testing.T) {
	var mu sync.Mutex
	var prompts []string
	var answer []int
	_, ts, _ := newTestServer(t, 0, func(s *Server) {
		segs, err := chat.RenderAnswer(chat.Message{
			ReasoningContent: "I should look it up.", Content: "Checking.",
			ToolCalls: []chat.ToolCall{{Function: chat.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris", "days": 2}`}}},
		}, chat.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if answer, err = chat.Encode(s.tok, segs); err != nil {
			t.Fatal(err)
		}
		s.script = func(prompt []int) []int {
			text := s.tok.DecodeLenient(prompt)
			mu.Lock()
			prompts = append(prompts, text)
			mu.Unlock()
			if strings.Contains(text, `role="tool"`) {
				return nil // the model answers on its own
			}
			return answer
		}
	})
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "k3-test",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a weather bot."),
			openai.UserMessage("What is the weather in Paris?"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("Get the weather & forecast of a city"),
			Parameters: shared.FunctionParameters{"type": "object", "required": []string{"city"},
				"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
		})},
		MaxCompletionTokens: openai.Int(400), // the tiny vocabulary spells the call in ~150 tokens
		Temperature:         openai.Float(0),
	}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.Content != "Checking." {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	call := c.Message.ToolCalls[0]
	var args map[string]any
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || call.Function.Name != "get_weather" ||
		!reflect.DeepEqual(args, map[string]any{"city": "Paris", "days": 2.0}) || call.ID == "" || call.Type != "function" {
		t.Errorf("tool call %+v (%v)", call, err)
	}
	if r := c.Message.JSON.ExtraFields["reasoning_content"].Raw(); r != `"I should look it up."` {
		t.Errorf("reasoning_content %s", r)
	}
	first := prompts[0]
	for _, want := range []string{
		"<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
			`[{"function":{"description":"Get the weather & forecast of a city","name":"get_weather","parameters":{"properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"],"type":"object"}},"type":"function"}]` + "\n```",
		"`thinking_effort=max`",
		"<|open|>message role=\"system\"<|sep|>You are a weather bot.<|close|>message<|sep|><|end_of_msg|>",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("first prompt %q lacks %q", first, want)
		}
	}

	// The result goes back; the model answers, thinking off.
	params.Messages = append(params.Messages, c.Message.ToParam(), openai.ToolMessage("18 C and sunny", call.ID))
	params.MaxCompletionTokens = openai.Int(20)
	resp2, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("thinking", map[string]string{"type": "disabled"}))
	if err != nil {
		t.Fatal(err)
	}
	if f := resp2.Choices[0].FinishReason; f != "stop" && f != "length" {
		t.Errorf("answer finish_reason %q: %s", f, resp2.RawJSON())
	}
	if _, ok := resp2.Choices[0].Message.JSON.ExtraFields["reasoning_content"]; ok {
		t.Errorf("reasoning with thinking off: %s", resp2.RawJSON())
	}
	second := prompts[1]
	for _, want := range []string{
		"<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|>" +
			"<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>" +
			"<|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
		"<|open|>message role=\"tool\" tool=\"get_weather\" index=\"1\"<|sep|>18 C and sunny<|close|>message<|sep|><|end_of_msg|>" +
			"<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>",
	} {
		if !strings.Contains(second, want) {
			t.Errorf("second prompt %q lacks %q", second, want)
		}
	}
	if strings.Contains(second, "thinking_effort") || strings.Contains(second, "<|open|>think") {
		t.Errorf("thinking off, yet the prompt thinks: %q", second)
	}

	// Streamed, with tool_choice and an effort.
	params.Messages = params.Messages[:2]
	params.MaxCompletionTokens = openai.Int(400)
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	params.ReasoningEffort = shared.ReasoningEffortHigh
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var reasoning, content strings.Builder
	var finished []openai.FinishedChatCompletionToolCall
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		if len(ch.Choices) > 0 {
			if r, ok := ch.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				json.Unmarshal([]byte(r.Raw()), &s)
				reasoning.WriteString(s)
			}
			content.WriteString(ch.Choices[0].Delta.Content)
		}
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if reasoning.String() != "I should look it up." || content.String() != "Checking." {
		t.Errorf("streamed reasoning %q, content %q", reasoning.String(), content.String())
	}
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("accumulated %+v", acc.ChatCompletion)
	}
	got := acc.Choices[0].Message.ToolCalls[0]
	if got.Function.Name != "get_weather" || got.Function.Arguments != call.Function.Arguments {
		t.Errorf("streamed call %+v, want %+v", got.Function, call.Function)
	}
	if len(finished) != 1 || finished[0].Name != "get_weather" {
		t.Errorf("finished calls %+v", finished)
	}
	third := prompts[2]
	for _, want := range []string{
		"`thinking_effort=high`",
		"What is the weather in Paris?<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked with `tool_choice=required`.",
	} {
		if !strings.Contains(third, want) {
			t.Errorf("third prompt %q lacks %q", third, want)
		}
	}
}
