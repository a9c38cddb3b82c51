package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/jsonscan"
)

// member is one top-level member of a client body: its name decoded (so
// "\u0070riority" is "priority") and its raw value.
type member struct {
	name    []byte
	escaped bool // the name had escapes: re-encode it
	val     []byte
}

// clientRequest is a parsed client body. members holds every top-level
// member once (the last of duplicates wins, as in encoding/json); writing
// the upstream body from it is what makes smuggling through duplicate keys
// or escaped spellings impossible.
type clientRequest struct {
	members      []member
	model        string
	stream       bool
	wantsUsage   bool // the client asked for stream_options.include_usage
	continuousOK bool // stream_options.continuous_usage_stats = true
	promptBytes  int  // size of messages / prompt / input, for estimates
	// maxOutput is the client's output limit: max_completion_tokens, else
	// max_tokens (vLLM's precedence); 0 when it gave none usable.
	maxOutput int64
	// completionField: the client named max_completion_tokens, which an
	// output limit the gateway sets replaces.
	completionField bool
	// badOutput names the output limit field the client set to something
	// other than a positive integer ("" = none): under a budget that is a
	// 400, since the gateway could not bound the engine by it.
	badOutput string
	// prompts and seqs: the prompts of the request and the sequences the
	// engine generates for it (parseSequences); badSeqs names an n or
	// best_of that is not a positive integer.
	prompts, seqs int64
	badSeqs       string
	// responses: a Responses API body (responses.go): its output limit is
	// max_output_tokens, its stream_options are the client's, store false.
	responses bool
}

func invalid(param, format string, args ...any) error {
	e := llmflow.Errorf(llmflow.EINVALID, format, args...)
	e.Param = param
	return e
}

// parseRequest checks a client body for ep and splits its top-level
// members. The body is validated strictly first; the members are then
// sliced out without decoding them.
func parseRequest(body []byte, ep engine.Endpoint) (*clientRequest, error) {
	if !json.Valid(body) {
		return nil, invalid("", "request body must be valid JSON")
	}
	if !utf8.Valid(body) {
		return nil, invalid("", "request body must be UTF-8")
	}
	it, ok := jsonscan.NewObject(body)
	if !ok {
		return nil, invalid("", "request body must be a JSON object")
	}
	rq := &clientRequest{members: make([]member, 0, 16)}
	var index map[string]int // built once there are many members, so duplicates stay linear
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		m := member{name: k, val: v}
		if bytes.IndexByte(k, '\\') >= 0 {
			var s string
			q := make([]byte, 0, len(k)+2)
			q = append(append(append(q, '"'), k...), '"')
			if json.Unmarshal(q, &s) != nil {
				return nil, invalid("", "request body must be valid JSON")
			}
			m.name, m.escaped = []byte(s), true
		}
		rq.add(m, &index)
	}
	if it.Bad() {
		return nil, invalid("", "request body must be a JSON object")
	}

	raw := rq.get("model")
	if raw == nil {
		return nil, invalid("model", "you must provide a model parameter")
	}
	if err := json.Unmarshal(raw, &rq.model); err != nil || rq.model == "" {
		return nil, invalid("model", "model must be a non-empty string")
	}
	switch raw := rq.get("stream"); string(raw) {
	case "", "null", "false":
	case "true":
		rq.stream = true
	default:
		return nil, invalid("stream", "stream must be a boolean")
	}
	if rq.stream && ep == engine.Embeddings {
		return nil, invalid("stream", "embeddings cannot be streamed")
	}
	if ep == engine.Responses {
		if err := rq.parseResponses(); err != nil {
			return nil, err
		}
		return rq, nil
	}
	if raw := rq.get("stream_options"); raw != nil && string(raw) != "null" {
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
	for _, f := range [...]string{"messages", "prompt", "input", "tools", "functions"} {
		rq.promptBytes += len(rq.get(f))
	}
	if raw := rq.get("max_completion_tokens"); raw != nil && string(raw) != "null" {
		rq.maxOutput, rq.completionField = positiveInt(raw), true
		if rq.maxOutput == 0 {
			rq.badOutput = "max_completion_tokens"
		}
	} else if raw := rq.get("max_tokens"); raw != nil && string(raw) != "null" {
		if rq.maxOutput = positiveInt(raw); rq.maxOutput == 0 {
			rq.badOutput = "max_tokens"
		}
	}
	rq.parseSequences(ep)
	return rq, nil
}

// positiveInt returns the JSON integer b when it is one between 1 and
// 2^40, else 0 (the engine refuses what is not a positive integer).
func positiveInt(b []byte) int64 {
	if n := jsonscan.ParseInt(b); n >= 1 && n <= 1<<40 {
		return n
	}
	return 0
}

// add appends m, or replaces the value of an earlier member of that name.
func (rq *clientRequest) add(m member, index *map[string]int) {
	const linear = 32
	if *index == nil && len(rq.members) < linear {
		for i := range rq.members {
			if bytes.Equal(rq.members[i].name, m.name) {
				rq.members[i] = m
				return
			}
		}
		rq.members = append(rq.members, m)
		return
	}
	if *index == nil {
		*index = make(map[string]int, 2*linear)
		for i, x := range rq.members {
			(*index)[string(x.name)] = i
		}
	}
	if i, ok := (*index)[string(m.name)]; ok {
		rq.members[i] = m
		return
	}
	(*index)[string(m.name)] = len(rq.members)
	rq.members = append(rq.members, m)
}

// get returns the raw value of the member name, nil when absent.
func (rq *clientRequest) get(name string) []byte {
	for i := range rq.members {
		if string(rq.members[i].name) == name {
			return rq.members[i].val
		}
	}
	return nil
}

// upstreamBody is what the rewrite adds to, and takes out of, a request.
type upstreamBody struct {
	engine    *engine.Descriptor // its Strip members are left out
	model     string             // upstream model name
	cacheSalt string             // per-organisation salt; "" = none
	priority  int
	withPrio  bool // put priority in the body
	// outputLimit, when > 0, replaces the client's max_tokens and
	// max_completion_tokens: what the request's budgets pay for.
	outputLimit int64
	// continuous asks a stream's engine for its running usage in every
	// chunk (continuous_usage_stats), whatever the client asked.
	continuous bool
}

// encode writes the upstream body: the client's members in their order,
// minus the stripped ones, with model, stream_options, cache_salt and
// priority set by the gateway.
func (rq *clientRequest) encode(u upstreamBody) []byte {
	size := 128 + len(u.model) + len(u.cacheSalt)
	for _, m := range rq.members {
		size += len(m.name) + len(m.val) + 4
	}
	b := make([]byte, 0, size)
	b = append(b, `{"model":`...)
	b = appendJSONString(b, u.model)
	for _, m := range rq.members {
		switch string(m.name) {
		case "model":
			continue
		case "stream_options":
			if !rq.responses {
				continue
			}
		case "max_tokens", "max_completion_tokens":
			if u.outputLimit > 0 && !rq.responses {
				continue
			}
		case "max_output_tokens":
			if u.outputLimit > 0 && rq.responses {
				continue
			}
		case "store":
			if rq.responses {
				continue
			}
		}
		if u.engine.Strips(m.name) {
			continue
		}
		b = append(b, ',')
		if m.escaped {
			b = appendJSONString(b, string(m.name))
		} else {
			b = append(b, '"')
			b = append(b, m.name...)
			b = append(b, '"')
		}
		b = append(b, ':')
		b = append(b, m.val...)
	}
	if rq.stream && !rq.responses {
		b = append(b, `,"stream_options":{"include_usage":true`...)
		if rq.continuousOK || u.continuous {
			b = append(b, `,"continuous_usage_stats":true`...)
		}
		b = append(b, '}')
	}
	if rq.responses {
		b = append(b, `,"store":false`...)
	}
	if u.outputLimit > 0 {
		switch {
		case rq.responses:
			b = append(b, `,"max_output_tokens":`...)
		case rq.completionField:
			b = append(b, `,"max_completion_tokens":`...)
		default:
			b = append(b, `,"max_tokens":`...)
		}
		b = strconv.AppendInt(b, u.outputLimit, 10)
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
