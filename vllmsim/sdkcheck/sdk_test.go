package sdkcheck_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// The official Go SDK parses every response shape the simulator produces.
const testModel = "sim/llama"

func TestOpenAISDK(t *testing.T) {
	s := vllmsim.New(vllmsim.Config{APIKey: "k", StepInterval: time.Millisecond})
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	client := openai.NewClient(
		option.WithBaseURL(hs.URL+"/v1/"),
		option.WithUnsafeAllowHTTP(),
		option.WithAPIKey("k"),
		option.WithMaxRetries(0),
	)
	ctx := t.Context()

	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     testModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there, simulator")},
		MaxTokens: openai.Int(3),
	}, option.WithHeader(vllmsim.PriorityHeader, "4"))
	if err != nil {
		t.Fatal(err)
	}
	if chat.Choices[0].Message.Content != "tok0 tok1 tok2 " || chat.Choices[0].FinishReason != "length" ||
		chat.Usage.CompletionTokens != 3 || chat.Usage.PromptTokens != 5 {
		t.Fatalf("chat %+v", chat)
	}
	if r := s.Received(); r[len(r)-1].Priority != 4 {
		t.Fatalf("priority %d", r[len(r)-1].Priority)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         testModel,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there, simulator")},
		MaxTokens:     openai.Int(4),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatal("chunk not accumulated")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "tok0 tok1 tok2 tok3 " || acc.Usage.TotalTokens != 9 {
		t.Fatalf("accumulated %+v usage %+v", acc.Choices[0].Message, acc.Usage)
	}

	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     testModel,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3}},
		MaxTokens: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Choices[0].Text != "tok0 tok1 " || comp.Usage.PromptTokens != 3 {
		t.Fatalf("completion %+v", comp)
	}

	cstream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:     testModel,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("abcd")},
		MaxTokens: openai.Int(2),
	})
	var text strings.Builder
	for cstream.Next() {
		for _, c := range cstream.Current().Choices {
			text.WriteString(c.Text)
		}
	}
	if err := cstream.Err(); err != nil || text.String() != "tok0 tok1 " {
		t.Fatalf("completion stream %q %v", text.String(), err)
	}

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: testModel,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
	})
	if err != nil || len(emb.Data) != 2 || len(emb.Data[0].Embedding) != 8 || emb.Usage.PromptTokens != 2 {
		t.Fatalf("embeddings %+v %v", emb, err)
	}

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != testModel || models.Data[0].OwnedBy != "vllm" {
		t.Fatalf("models %+v %v", models, err)
	}

	model, err := client.Models.Get(ctx, testModel) // the SDK escapes the slash
	if err != nil || model.ID != testModel || model.Object != "model" || model.OwnedBy != "vllm" {
		t.Fatalf("models.retrieve %+v %v", model, err)
	}
	var apiErr *openai.Error
	if _, err := client.Models.Get(ctx, "nope"); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("models.retrieve of an unknown model: %v", err)
	}

	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:           testModel,
		Instructions:    openai.String("be brief"),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there, simulator")},
		MaxOutputTokens: openai.Int(3),
	}, option.WithHeader(vllmsim.PriorityHeader, "2"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "tok0 tok1 tok2 " || resp.Status != responses.ResponseStatusIncomplete ||
		resp.IncompleteDetails.Reason != "max_output_tokens" || resp.Usage.InputTokens != 7 || resp.Usage.OutputTokens != 3 {
		t.Fatalf("response %+v", resp)
	}
	if r := s.Received(); r[len(r)-1].Priority != 2 {
		t.Fatalf("priority %d", r[len(r)-1].Priority)
	}

	rstream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: testModel,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("hello there, simulator", responses.EasyInputMessageRoleUser),
		}},
	})
	var deltas strings.Builder
	var final responses.Response
	var seq int64
	for rstream.Next() {
		ev := rstream.Current()
		if ev.SequenceNumber != seq {
			t.Fatalf("event %s has sequence number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := rstream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas.String() != final.OutputText() || final.Status != responses.ResponseStatusCompleted ||
		final.Usage.OutputTokens != 16 || final.Usage.InputTokens != 5 || final.Model != testModel {
		t.Fatalf("streamed %q, final %+v", deltas.String(), final)
	}

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.Message, "does not exist") {
		t.Fatalf("unknown model error %v", err)
	}
}
