package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/go-llmflow/llmflow"
)

// TestOpenAIGoSDKResponses drives /v1/responses and /v1/models/{id}
// through the gateway (serve, SQLite) to vllmsim with the official Go SDK:
// the SDK's own types parse every answer and event, the model it asked for
// comes back, and the records hold the engine's usage.
func TestOpenAIGoSDKResponses(t *testing.T) {
	e := startE2E(t)
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey(e.key), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	model, err := client.Models.Get(ctx, "sim-llama")
	if err != nil || model.ID != "sim-llama" || model.Object != "model" || model.OwnedBy != "llmflow" || model.Created == 0 {
		t.Fatalf("models.retrieve: %v %+v", err, model)
	}
	var apiErr *openai.Error
	if _, err := client.Models.Get(ctx, "sim/llama"); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type != "invalid_request_error" {
		t.Fatalf("models.retrieve of the engine's name: %v", err)
	}

	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:           "sim-llama",
		Instructions:    openai.String("Answer briefly"),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello there")},
		MaxOutputTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "sim-llama" || resp.OutputText() != "tok0 tok1 tok2 tok3 " || resp.Usage.OutputTokens != 4 || resp.Usage.InputTokens != 6 {
		t.Errorf("response: model %q text %q usage %+v", resp.Model, resp.OutputText(), resp.Usage)
	}

	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "sim-llama",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Hello", responses.EasyInputMessageRoleUser),
		}},
		MaxOutputTokens: openai.Int(6),
	})
	var text strings.Builder
	var final responses.Response
	events := 0
	for stream.Next() {
		ev := stream.Current()
		events++
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response.Model != "sim-llama" {
				t.Errorf("%s: model %q", ev.Type, ev.Response.Model)
			}
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.incomplete":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "tok0 tok1 tok2 tok3 tok4 tok5 " || final.OutputText() != text.String() || final.Model != "sim-llama" ||
		final.Usage.OutputTokens != 6 || final.IncompleteDetails.Reason != "max_output_tokens" || events != 14 {
		// created, in_progress, item and part added, 6 deltas, text, part and item done, incomplete
		t.Errorf("stream: %d events, text %q, final %s", events, text.String(), final.RawJSON())
	}

	for _, r := range e.sim.Received() {
		if r.Path != "/v1/responses" || r.Model != "sim/llama" || r.Body["store"] != false || r.Header.Get("X-Vllm-Priority") != "0" {
			t.Errorf("engine saw %s %s %v", r.Path, r.RawBody, r.Header)
		}
		if s, _ := r.Body["cache_salt"].(string); len(s) != 43 {
			t.Errorf("engine saw cache_salt %q", s)
		}
	}
	recs := e.records(t)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(recs), recs)
	}
	for i, want := range []struct {
		prompt, completion int64
		stream             bool
	}{{6, 4, false}, {1, 6, true}} {
		r := recs[i]
		if r.Model != "sim-llama" || r.Outcome != llmflow.OutcomeOK || r.Estimated || r.Stream != want.stream ||
			r.PromptTokens != want.prompt || r.CompletionTokens != want.completion || r.GPUHours <= 0 {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}
