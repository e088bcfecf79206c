package server

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/k3go/k3/chat"
)

func responsesClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// weatherParams is turn 1 of the tool conversation in the Responses API.
func weatherParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:        "k3-test",
		Instructions: openai.String("You are a weather bot."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{
			"type": "object", "required": []string{"city"},
			"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}}, false)},
		MaxOutputTokens: openai.Int(400), // the tiny vocabulary spells the call in ~150 tokens
		Reasoning:       shared.ReasoningParam{Effort: shared.ReasoningEffortHigh},
	}
}

// checkTurn1 checks the reply to turn 1: reasoning as summary text, the
// message, the call; usage that adds up. It returns the call.
func checkTurn1(t *testing.T, r *responses.Response) responses.ResponseFunctionToolCall {
	t.Helper()
	if r.Status != "completed" || len(r.Output) != 3 || r.Model != "k3-test" || !strings.HasPrefix(r.ID, "resp_") {
		t.Fatalf("turn 1: %s", r.RawJSON())
	}
	rs := r.Output[0].AsReasoning()
	if r.Output[0].Type != "reasoning" || len(rs.Summary) != 1 || rs.Summary[0].Text != "I should look it up." {
		t.Errorf("reasoning item %s", r.Output[0].RawJSON())
	}
	if r.Output[1].Type != "message" || r.OutputText() != "Checking." {
		t.Errorf("message item %s", r.Output[1].RawJSON())
	}
	call := r.Output[2].AsFunctionCall()
	var args map[string]any
	if r.Output[2].Type != "function_call" || call.Name != "get_weather" || call.CallID == "" ||
		json.Unmarshal([]byte(call.Arguments), &args) != nil || !reflect.DeepEqual(args, map[string]any{"city": "Paris", "days": 2.0}) {
		t.Errorf("call item %s", r.Output[2].RawJSON())
	}
	u := r.Usage
	if u.InputTokens == 0 || u.OutputTokens == 0 || u.TotalTokens != u.InputTokens+u.OutputTokens ||
		u.OutputTokensDetails.ReasoningTokens == 0 || u.OutputTokensDetails.ReasoningTokens >= u.OutputTokens ||
		!u.JSON.InputTokensDetails.Valid() || u.InputTokensDetails.CachedTokens != 0 {
		t.Errorf("usage %s", u.RawJSON())
	}
	return call
}

// TestResponsesClient: the official client runs the two-turn tool
// conversation, not streamed; turn 2 sends only the tool's output, with
// previous_response_id. The stored response can be read back and
// deleted; then a follow-up on it is a 404.
func TestResponsesClient(t *testing.T) {
	s, ts, log := newScripted(t, Options{}, weatherAnswer)
	c := responsesClient(ts.URL)
	ctx := context.Background()
	r1, err := c.Responses.New(ctx, weatherParams())
	if err != nil {
		t.Fatal(err)
	}
	call := checkTurn1(t, r1)
	if u := r1.Usage; int(u.InputTokens) != countedLen(t, s, log.last(t, 1)[0]) {
		t.Errorf("input_tokens %d, prompt %d tokens as the template counts them", u.InputTokens, countedLen(t, s, log.last(t, 1)[0]))
	}
	if p := log.text(t, -1); !strings.Contains(p, "You are a weather bot.") || !strings.Contains(p, "`thinking_effort=high`") || !strings.Contains(p, `"name":"get_weather"`) {
		t.Errorf("turn 1 prompt %q", p)
	}

	p2 := responses.ResponseNewParams{Model: "k3-test", PreviousResponseID: openai.String(r1.ID), MaxOutputTokens: openai.Int(400),
		Instructions: openai.String("You are a weather bot."), Tools: weatherParams().Tools,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(call.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("18 C and sunny")}}}}}}
	r2, err := c.Responses.New(ctx, p2)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Status != "completed" || r2.OutputText() != "It is sunny." || r2.PreviousResponseID != r1.ID {
		t.Errorf("turn 2: %s", r2.RawJSON())
	}
	second := log.text(t, -1)
	for _, want := range []string{
		"<|open|>think<|sep|>I should look it up.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"",
		"<|open|>message role=\"tool\" tool=\"get_weather\" index=\"1\"<|sep|>18 C and sunny<|close|>message",
	} {
		if !strings.Contains(second, want) {
			t.Errorf("turn 2 prompt %q lacks %q", second, want)
		}
	}
	if strings.Count(second, "You are a weather bot.") != 1 {
		t.Errorf("instructions carried over from the previous response: %q", second)
	}

	got, err := c.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != r2.ID || got.OutputText() != "It is sunny." {
		t.Fatalf("get: %v %+v", err, got)
	}
	if err := c.Responses.Delete(ctx, r1.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	apiErr(t, err, 404, "response_id")
	_, err = c.Responses.New(ctx, p2)
	apiErr(t, err, 404, "previous_response_id")
	// Turn 2 again, on r2: the chain goes on.
	p3 := p2
	p3.PreviousResponseID = openai.String(r2.ID)
	p3.Input = responses.ResponseNewParamsInputUnion{OfString: openai.String("Thanks!")}
	if _, err := c.Responses.New(ctx, p3); err != nil {
		t.Fatal(err)
	}
	if third := log.text(t, -1); !strings.Contains(third, "It is sunny.") || !strings.Contains(third, "18 C and sunny") || !strings.HasSuffix(third, "<|open|>think<|sep|>") {
		t.Errorf("turn 3 prompt %q", third)
	}
}

// streamResponse runs a streamed request, feeding every event to the
// client's own accumulator (the Responses event union it reads), and
// checks the event order; it returns the completed response.
func streamResponse(t *testing.T, c openai.Client, params responses.ResponseNewParams) *responses.Response {
	t.Helper()
	stream := c.Responses.NewStreaming(context.Background(), params)
	var acc responses.ResponseAccumulator
	var types []string
	var final *responses.Response
	for stream.Next() {
		ev := stream.Current()
		if int(ev.SequenceNumber) != len(types) {
			t.Errorf("event %d (%s) has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		var u responses.ResponsesServerEventUnion
		if err := json.Unmarshal([]byte(ev.RawJSON()), &u); err != nil {
			t.Fatal(err)
		}
		if err := acc.AddEvent(u); err != nil {
			t.Fatalf("the accumulator refuses event %d %s: %v", len(types)-1, ev.RawJSON(), err)
		}
		if ev.Type == "response.completed" {
			r := ev.Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" || types[len(types)-1] != "response.completed" || final == nil {
		t.Fatalf("events %q", types)
	}
	rebuilt, err := acc.ReconstructedResponse()
	if err != nil {
		t.Fatal(err)
	}
	snap := acc.Snapshot()
	if rebuilt.ID != final.ID || len(rebuilt.Output) != len(final.Output) || snap.OutputText() != final.OutputText() {
		t.Errorf("accumulated %s, completed %s", rebuilt.RawJSON(), final.RawJSON())
	}
	// Every item was announced, then finished, in order.
	added, done := 0, 0
	for _, ty := range types {
		switch ty {
		case "response.output_item.added":
			added++
		case "response.output_item.done":
			done++
			if done > added {
				t.Errorf("an item finished before it was added: %q", types)
			}
		}
	}
	if added != len(final.Output) || done != added {
		t.Errorf("%d items added, %d done, %d in the response: %q", added, done, len(final.Output), types)
	}
	return final
}

// TestResponsesClientStreamed: the same conversation streamed, as Codex
// runs it: store false, reasoning.encrypted_content included, and turn 2
// replays the whole input with the reasoning given back. Its prompt is
// exactly that of turn 2 through previous_response_id.
func TestResponsesClientStreamed(t *testing.T) {
	_, ts, log := newScripted(t, Options{}, weatherAnswer)
	c := responsesClient(ts.URL)
	p1 := weatherParams()
	p1.Store = openai.Bool(false)
	p1.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	p1.PromptCacheKey = openai.String("session-1")
	r1 := streamResponse(t, c, p1)
	call := checkTurn1(t, r1)
	if enc := r1.Output[0].AsReasoning().EncryptedContent; enc == "" {
		t.Errorf("no encrypted_content: %s", r1.Output[0].RawJSON())
	}
	if _, err := c.Responses.Get(context.Background(), r1.ID, responses.ResponseGetParams{}); err == nil {
		t.Error("a store: false response was kept")
	}

	// Replay: the question, the output items given back, the tool's output.
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("What is the weather in Paris?", responses.EasyInputMessageRoleUser)}
	for _, it := range r1.Output {
		switch it.Type {
		case "reasoning":
			// The encrypted content wins over the summary.
			rp := responses.ResponseReasoningItemParam{ID: it.ID, EncryptedContent: openai.String(it.AsReasoning().EncryptedContent),
				Summary: []responses.ResponseReasoningItemSummaryParam{{Text: "not what was thought"}}}
			input = append(input, responses.ResponseInputItemUnionParam{OfReasoning: &rp})
		case "message":
			mp := it.AsMessage().ToParam()
			input = append(input, responses.ResponseInputItemUnionParam{OfOutputMessage: &mp})
		case "function_call":
			fp := it.AsFunctionCall().ToParam()
			input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCall: &fp})
		}
	}
	input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
		CallID: openai.String(call.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("18 C and sunny")}}})
	p2 := p1
	p2.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	r2 := streamResponse(t, c, p2)
	if r2.OutputText() != "It is sunny." || r2.Status != "completed" {
		t.Errorf("turn 2: %s", r2.RawJSON())
	}
	replayed := log.last(t, 1)[0]

	// The same turn 2 through previous_response_id.
	p1.Store = param.Opt[bool]{}
	r1b, err := c.Responses.New(context.Background(), p1)
	if err != nil {
		t.Fatal(err)
	}
	p3 := responses.ResponseNewParams{Model: "k3-test", PreviousResponseID: openai.String(r1b.ID), Instructions: p1.Instructions, Tools: p1.Tools,
		MaxOutputTokens: p1.MaxOutputTokens, Reasoning: p1.Reasoning,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String(r1b.Output[2].AsFunctionCall().CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("18 C and sunny")}}}}}}
	if _, err := c.Responses.New(context.Background(), p3); err != nil {
		t.Fatal(err)
	}
	if chained := log.last(t, 1)[0]; !slices.Equal(chained, replayed) {
		t.Errorf("turn 2 replayed renders\n%q\nthrough previous_response_id\n%q", log.text(t, -3), log.text(t, -1))
	}
}

// TestResponsesLimits: max_output_tokens cuts a reply (incomplete, with
// the reason); parallel_tool_calls false ends it at its first call; the
// store keeps at most StoredResponses.
func TestResponsesLimits(t *testing.T) {
	_, ts, _ := newScripted(t, Options{StoredResponses: 2}, func(p string) *chat.Message {
		m := weatherAnswer(p)
		m.ToolCalls = append(m.ToolCalls, m.ToolCalls[0])
		return m
	})
	c := responsesClient(ts.URL)
	ctx := context.Background()
	p := weatherParams()
	p.MaxOutputTokens = openai.Int(5)
	r, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 5 {
		t.Errorf("cut reply %s", r.RawJSON())
	}
	p = weatherParams()
	r, err = c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Output); n != 4 || r.Output[3].Type != "function_call" {
		t.Fatalf("two calls wanted: %s", r.RawJSON())
	}
	p.ParallelToolCalls = openai.Bool(false)
	r1, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r1.Output); n != 3 || r1.Output[2].Type != "function_call" || r1.Status != "completed" || r1.Usage.OutputTokens >= r.Usage.OutputTokens {
		t.Errorf("parallel_tool_calls false: %s", r1.RawJSON())
	}
	// Three responses stored, two kept: the oldest is gone.
	var ids []string
	for range 3 {
		p.MaxOutputTokens = openai.Int(3)
		r, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	_, err = c.Responses.Get(ctx, ids[0], responses.ResponseGetParams{})
	apiErr(t, err, 404, "response_id")
	for _, id := range ids[1:] {
		if _, err := c.Responses.Get(ctx, id, responses.ResponseGetParams{}); err != nil {
			t.Errorf("response %s: %v", id, err)
		}
	}
	var e *openai.Error
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "k3-test", PreviousResponseID: openai.String(ids[0]),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("more")}})
	if !errors.As(err, &e) || e.StatusCode != 404 || e.Param != "previous_response_id" || !strings.Contains(e.Message, "evicted") {
		t.Errorf("follow-up on an evicted response: %v", err)
	}
}
