package sse

import (
	"bytes"

	"github.com/go-llmflow/llmflow/internal/jsonscan"
)

// The Responses API (/v1/responses) streams typed events, each as an
// "event: <type>" line and a data line whose JSON has the same top-level
// "type" (vLLM, llama-server and OpenAI alike):
//
//	event: response.created                 {"type":…,"response":{…,"model":…,"usage":null}}
//	event: response.output_text.delta       {"type":…,"delta":"…",…}
//	…
//	event: response.completed               {"type":…,"response":{…,"usage":{…}}}
//
// The stream ends with a terminal event, response.completed,
// response.incomplete (an output limit was reached) or response.failed,
// whose "response" carries the usage as input_tokens, output_tokens and
// input_tokens_details.cached_tokens; no "data: [DONE]" follows (some
// servers add one, which Copy then never reads). An "error" event, or
// response.failed, is an error.

// Event types and members inspectResponse looks for, as raw JSON.
var (
	typeCompleted  = []byte(`"response.completed"`)
	typeIncomplete = []byte(`"response.incomplete"`)
	typeFailed     = []byte(`"response.failed"`)
	typeError      = []byte(`"error"`)
	deltaSuffix    = []byte(`.delta"`)
	responseTail   = []byte(`response"`)
)

// inspectResponse classifies one event's data of a Responses API stream:
// done for a terminal event (or [DONE]), with the usage of its response;
// choices for a delta event (text, reasoning, function arguments: each
// about one token); isError for an error event, response.failed, or a
// non-null top-level "error" without a "type" (vLLM's error shape). The
// top-level members are walked once (the last of duplicates wins, as in
// encoding/json); malformed JSON gives a zero chunk (forwarded as it is).
func inspectResponse(data []byte) (c chunk) {
	if bytes.HasPrefix(data, doneMarker) {
		c.done = true
		return c
	}
	it, ok := jsonscan.NewObject(data)
	if !ok {
		return c
	}
	var typ, resp, errv []byte
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch string(k) {
		case "type":
			typ = v
		case "response":
			resp = v
		case "error":
			errv = v
		}
	}
	switch {
	case it.Bad():
		return chunk{}
	case typ == nil:
		c.isError = errv != nil && string(errv) != "null"
		return c
	case bytes.HasSuffix(typ, deltaSuffix):
		c.choices = true
	case bytes.Equal(typ, typeCompleted), bytes.Equal(typ, typeIncomplete):
		c.done = true
	case bytes.Equal(typ, typeFailed):
		c.done, c.isError = true, true
	case bytes.Equal(typ, typeError):
		c.isError = true
	}
	if c.done && resp != nil {
		c.usage, c.hasUsage = responseUsageIn(resp)
	}
	return c
}

// responseUsageIn is the usage of a response object (the last "usage"
// member); ok is false without one.
func responseUsageIn(resp []byte) (Usage, bool) {
	it, ok := jsonscan.NewObject(resp)
	if !ok {
		return Usage{}, false
	}
	var val []byte
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		if string(k) == "usage" {
			val = v
		}
	}
	if it.Bad() || val == nil {
		return Usage{}, false
	}
	return parseResponseUsageObject(val)
}

// ParseResponseUsage extracts the top-level "usage" object of a Responses
// API answer (input_tokens, output_tokens, total_tokens,
// input_tokens_details.cached_tokens) as a Usage in chat's terms. ok and
// the last-one-wins and Malformed rules are ParseUsage's.
func ParseResponseUsage(body []byte) (u Usage, ok bool) { return responseUsageIn(body) }

// parseResponseUsageObject decodes a Responses usage object by
// parseUsageObject's rules, under the Responses names.
func parseResponseUsageObject(v []byte) (u Usage, ok bool) { return parseUsageNamed(v, responsesUsage) }

// renameResponseModel is renameModel for a Responses API event: the model
// is the "model" member of the event's top-level "response" object
// (response.created, .in_progress, .completed…); other events have none
// and are returned as they are, after one byte search.
func renameResponseModel(buf, raw, data, name []byte) ([]byte, []byte) {
	if indexKey(data, 0, responseTail) < 0 {
		return raw, buf
	}
	s, e, ok := jsonscan.Member(data, "response")
	if !ok || data[s] != '{' {
		return raw, buf
	}
	ms, me, ok := jsonscan.Member(data[s:e], "model")
	if !ok || data[s+ms] != '"' || bytes.Equal(data[s+ms:s+me], name) {
		return raw, buf
	}
	off := dataOffset(raw, data)
	if off < 0 {
		return raw, buf
	}
	buf = append(buf[:0], raw[:off+s+ms]...)
	buf = append(buf, name...)
	buf = append(buf, raw[off+s+me:]...)
	return buf, buf
}
