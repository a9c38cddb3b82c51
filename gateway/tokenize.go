package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/go-llmflow/llmflow/engine"
)

// tokenizeTimeout bounds asking an engine to count a prompt.
const tokenizeTimeout = 2 * time.Second

// countPrompt asks x's engine how many tokens x's prompt is, with its
// tokenizer endpoint (engine.Descriptor.Tokenize): for a request that
// ended without the engine's usage (its client left, the stream broke), so
// that the record holds the engine's count rather than an estimate. It
// returns false when the engine cannot be asked or does not answer within
// tokenizeTimeout.
func (g *Gateway) countPrompt(x *exchange) (int64, bool) {
	if x.tried == nil || x.rq == nil || x.rt == nil {
		return 0, false
	}
	pl := x.rt.pool
	ctx, cancel := context.WithTimeout(context.Background(), tokenizeTimeout)
	defer cancel()
	messages, prompt := x.rq.get("messages"), x.rq.get("prompt")
	if x.rq.responses {
		messages = x.rq.responsesMessages() // nil: not text alone
	}
	switch pl.engine.Tokenize {
	case engine.TokenizeVLLM:
		body := map[string]json.RawMessage{"model": appendJSONString(nil, x.rt.upstreamModel)}
		switch {
		case messages != nil:
			body["messages"] = messages
		case prompt != nil:
			body["prompt"] = prompt
		default:
			return 0, false
		}
		var out struct {
			Count *int64 `json:"count"`
		}
		if !g.askEngine(ctx, x, "/tokenize", body, &out) || out.Count == nil || *out.Count < 0 {
			return 0, false
		}
		return *out.Count, true
	case engine.TokenizeLlamaServer:
		content := prompt
		if messages != nil { // the chat template first
			var tpl struct {
				Prompt json.RawMessage `json:"prompt"`
			}
			if !g.askEngine(ctx, x, "/apply-template", map[string]json.RawMessage{"messages": messages}, &tpl) {
				return 0, false
			}
			content = tpl.Prompt
		}
		if len(content) == 0 || content[0] != '"' {
			return 0, false
		}
		var out struct {
			Tokens []json.RawMessage `json:"tokens"`
		}
		if !g.askEngine(ctx, x, "/tokenize", map[string]json.RawMessage{"content": content}, &out) || out.Tokens == nil {
			return 0, false
		}
		return int64(len(out.Tokens)), true
	}
	return 0, false
}

// askEngine POSTs body to path on the engine x was sent to (its base URL) and decodes a
// 200 answer of at most 1 MiB into out.
func (g *Gateway) askEngine(ctx context.Context, x *exchange, path string, body any, out any) bool {
	b, err := json.Marshal(body)
	if err != nil {
		return false
	}
	u, err := url.Parse(x.tried.b.base + path)
	if err != nil {
		return false
	}
	h := http.Header{"Content-Type": hdrJSON, "User-Agent": g.userAgent}
	if x.tried.authHdr != nil {
		h["Authorization"] = x.tried.authHdr
	}
	resp, err := x.rt.pool.transport.RoundTrip(newUpstreamRequest(ctx, u, h, b))
	if err != nil {
		return false
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return false
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out) == nil
}

// countedPrompt replaces the estimated prompt of x's record by the
// engine's count where it can be asked; true when it could. For a stream
// the completion is then the chunks forwarded, and the record is the
// engine's count, not an estimate.
func (g *Gateway) countedPrompt(x *exchange) bool {
	n, ok := g.countPrompt(x)
	if !ok || n > x.promptBound() { // believed within what was sent, as usage (validUsage)
		return false
	}
	x.rec.PromptTokens = n
	if x.rq.stream {
		x.rec.Estimated, x.rec.EstimateReason = false, ""
	}
	return true
}
