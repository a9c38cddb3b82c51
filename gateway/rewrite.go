package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/go-llmflow/llmflow"
)

// endpoint is one of the proxied OpenAI routes.
type endpoint uint8

const (
	chatCompletions endpoint = iota
	completions
	embeddings
)

func (e endpoint) path() string {
	switch e {
	case chatCompletions:
		return "/v1/chat/completions"
	case completions:
		return "/v1/completions"
	default:
		return "/v1/embeddings"
	}
}

// strippedFields never reach an engine: they would let a client choose its
// scheduling priority, its request id, its session, its KV transfer or
// prefix-cache partition, or a llama-server slot. See
// shared/reference/engines.md A4 and B3.
var strippedFields = []string{
	"priority",
	"extra_body",
	"request_id",
	"kv_transfer_params",
	"ec_transfer_params",
	"vllm_xargs",
	"session_id",
	"id_slot",
	"cache_salt",
}

// clientRequest is a parsed client body. Fields holds every top-level
// member once (the last of duplicates, names unescaped by the decoder);
// re-encoding it is what makes smuggling through duplicate keys or escaped
// spellings impossible.
type clientRequest struct {
	fields       map[string]json.RawMessage
	model        string
	stream       bool
	wantsUsage   bool // the client asked for stream_options.include_usage
	promptBytes  int  // size of messages / prompt / input, for estimates
	continuousOK bool // stream_options.continuous_usage_stats = true
}

func invalid(param, format string, args ...any) error {
	e := llmflow.Errorf(llmflow.EINVALID, format, args...)
	e.Param = param
	return e
}

// parseRequest decodes and checks a client body for ep.
func parseRequest(body []byte, ep endpoint) (*clientRequest, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, invalid("", "request body must be a JSON object")
	}
	rq := &clientRequest{fields: fields}
	raw, ok := fields["model"]
	if !ok {
		return nil, invalid("model", "you must provide a model parameter")
	}
	if err := json.Unmarshal(raw, &rq.model); err != nil || rq.model == "" {
		return nil, invalid("model", "model must be a non-empty string")
	}
	if raw, ok := fields["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &rq.stream); err != nil {
			return nil, invalid("stream", "stream must be a boolean")
		}
	}
	if rq.stream && ep == embeddings {
		return nil, invalid("stream", "embeddings cannot be streamed")
	}
	if raw, ok := fields["stream_options"]; ok && !isNull(raw) {
		if !rq.stream {
			return nil, invalid("stream_options", "stream_options is only allowed when stream is true")
		}
		var so struct {
			IncludeUsage         *bool `json:"include_usage"`
			ContinuousUsageStats *bool `json:"continuous_usage_stats"`
		}
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, invalid("stream_options", "stream_options must be an object of booleans")
		}
		rq.wantsUsage = so.IncludeUsage != nil && *so.IncludeUsage
		rq.continuousOK = so.ContinuousUsageStats != nil && *so.ContinuousUsageStats
	}
	for _, f := range [...]string{"messages", "prompt", "input"} {
		rq.promptBytes += len(fields[f])
	}
	return rq, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// upstreamBody is what the rewrite adds to a request.
type upstreamBody struct {
	model     string // upstream model name
	cacheSalt string // per-organisation salt; "" = none
	priority  int
	withPrio  bool // put priority in the body
}

// encode writes the upstream body: the client's fields minus the stripped
// ones, with model, cache_salt, stream_options and priority set by the
// gateway. Keys are written in sorted order.
func (rq *clientRequest) encode(u upstreamBody) []byte {
	keys := make([]string, 0, len(rq.fields)+3)
	for k := range rq.fields {
		switch k {
		case "model", "stream_options":
			continue
		}
		if slices.Contains(strippedFields, k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	size := 64 + len(u.model) + len(u.cacheSalt)
	for _, k := range keys {
		size += len(k) + len(rq.fields[k]) + 4
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	b = appendJSONString(b, "model")
	b = append(b, ':')
	b = appendJSONString(b, u.model)
	for _, k := range keys {
		b = append(b, ',')
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = append(b, rq.fields[k]...)
	}
	if rq.stream {
		b = append(b, `,"stream_options":{"include_usage":true`...)
		if rq.continuousOK {
			b = append(b, `,"continuous_usage_stats":true`...)
		}
		b = append(b, '}')
	}
	if u.cacheSalt != "" {
		b = append(b, `,"cache_salt":`...)
		b = appendJSONString(b, u.cacheSalt)
	}
	if u.withPrio {
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, int64(u.priority), 10)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Names that came out of the
// decoder are valid UTF-8; anything else is replaced, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
