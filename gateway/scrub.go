package gateway

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/go-llmflow/llmflow/internal/redact"
)

// scrubber removes from an engine's error text what the gateway itself put
// in the request and the client did not send, before the text reaches the
// client (relayError → upstreamMessage) or the log. It is built only when
// an engine answers with an error, so the success path never pays for it.
//
// The rule, applied in this order to the whole text (before any truncation,
// so a secret is never cut in two and left half visible):
//
//  1. Secrets become redact.Mask (redact.String): the engine key (the
//     upstream Authorization secret, without its "Bearer " prefix) and the
//     organisation's cache_salt, each as
//     sent and as a JSON encoder escapes it (Go's encoding/json escapes <, >
//     and &, Python's json.dumps non-ASCII), so an engine echoing the body
//     or the headers as JSON does not show them either.
//  2. The gateway's priority, when the pool's engine receives one (header
//     or body), becomes redact.Mask where it appears as a value of a
//     priority: the word "priority" in any case (so also the header name
//     X-Vllm-Priority), then at most 8 separator characters among
//     space, tab, CR, LF, `"`, `'`, `\`, `:`, `=`, `[`, `(`, then exactly the
//     decimal number the gateway sent (an optional '-' included), not
//     followed by another digit or a '.'. `"priority":12`, `'priority': 12`,
//     `x-vllm-priority: 12`, `\"priority\":12` and "Got priority 12" are
//     masked; "priority 123", "priority_level 12" and other numbers in the
//     text are kept. The client's own priority never reaches the engine
//     (engine.Stripped), so a masked number was the gateway's.
//  3. The upstream model name becomes the client's model name when the two
//     differ, so a client sees only its own names, where it stands as a
//     whole name: not preceded or followed by a character that names use
//     (letters, digits, "-", "_", ".", "/", ":"), so a short upstream name
//     ("m") never cuts into other words, and a client name that contains
//     the upstream name is not replaced again.
//
// The zero scrubber returns text unchanged.
type scrubber struct {
	secrets []string // for redact.String
	prio    string   // the gateway's priority as sent; "" = none sent
	// upstream → client model name; "" = the same name
	upstream, client string
}

// scrubberFor is the scrubber of x's upstream exchange.
func scrubberFor(x *exchange) *scrubber {
	s := &scrubber{}
	if x.up != nil && len(x.up.authHdr) > 0 {
		s.addSecret(strings.TrimPrefix(x.up.authHdr[0], "Bearer "))
	}
	if x.view != nil {
		s.addSecret(x.view.salts[x.org])
	}
	if x.rt != nil {
		if x.rt.pool.engine.SendsPriority() {
			s.prio = strconv.Itoa(x.rt.pool.engine.Wire(x.priority))
		}
		if x.rq != nil && x.rt.upstreamModel != x.rq.model && x.rq.model != "" {
			s.upstream, s.client = x.rt.upstreamModel, x.rq.model
		}
	}
	return s
}

// addSecret adds v and its JSON-escaped spellings.
func (s *scrubber) addSecret(v string) {
	if strings.TrimSpace(v) == "" {
		return
	}
	s.secrets = append(s.secrets, v)
	quoted := string(appendJSONString(nil, v)) // escapes <, >, & like encoding/json
	if q := quoted[1 : len(quoted)-1]; q != v {
		s.secrets = append(s.secrets, q)
	}
	if q := strconv.QuoteToASCII(v); q[1:len(q)-1] != v {
		s.secrets = append(s.secrets, q[1:len(q)-1]) // \uXXXX for non-ASCII, as json.dumps
	}
}

// String returns text scrubbed by the rule of scrubber.
func (s *scrubber) String(text string) string {
	if s == nil {
		return text
	}
	return s.scrub(text, s.client)
}

// json returns the JSON text data (an error event of a stream) scrubbed by
// the rule of scrubber, still valid JSON: the client's model name goes in
// JSON-escaped. Should the result not be valid JSON, a generic error event
// takes its place.
func (s *scrubber) json(data []byte) []byte {
	client := string(appendJSONString(nil, s.client))
	out := []byte(s.scrub(string(data), client[1:len(client)-1]))
	if !json.Valid(out) {
		return []byte(`{"error":{"message":"the engine failed","type":"server_error","code":502}}`)
	}
	return out
}

func (s *scrubber) scrub(text, client string) string {
	text = redact.String(text, s.secrets...)
	if s.prio != "" {
		text = maskPriority(text, s.prio)
	}
	if s.upstream != "" {
		text = replaceName(text, s.upstream, client)
	}
	return text
}

// replaceName replaces name by with in text where it stands as a whole
// name (rule 3 of scrubber).
func replaceName(text, name, with string) string {
	var b strings.Builder
	last := 0
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			break
		}
		start, end := i+j, i+j+len(name)
		i = start + 1
		if (start > 0 && isNameByte(text[start-1])) || !nameEnds(text, end) {
			continue
		}
		b.WriteString(text[last:start])
		b.WriteString(with)
		last, i = end, end
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// nameEnds reports whether a name ends at text[end]: the end of text, a
// byte no name uses, or punctuation a name may hold (".", ":", "/") that
// no name byte follows ("model up: …", "… up.").
func nameEnds(text string, end int) bool {
	if end >= len(text) || !isNameByte(text[end]) {
		return true
	}
	switch text[end] {
	case '.', ':', '/':
		return end+1 >= len(text) || !isNameByte(text[end+1])
	}
	return false
}

// isNameByte reports whether c may be part of a model name.
func isNameByte(c byte) bool {
	l := c | 0x20
	return 'a' <= l && l <= 'z' || isDigit(c) || c == '-' || c == '_' || c == '.' || c == '/' || c == ':' || c >= 0x80
}

// maskPriority replaces prio by redact.Mask where it is the value of a
// priority (rule 2 of scrubber).
func maskPriority(text, prio string) string {
	const word = "priority"
	const maxSep = 8
	var b strings.Builder
	last := 0 // text[:last] is written to b or was never needed
	for i := 0; ; {
		j := indexFold(text[i:], word)
		if j < 0 {
			break
		}
		k := i + j + len(word)
		i = k
		for n := 0; k < len(text) && n < maxSep && isPrioritySep(text[k]); n++ {
			k++
		}
		if !strings.HasPrefix(text[k:], prio) {
			continue
		}
		end := k + len(prio)
		if end < len(text) && (isDigit(text[end]) || text[end] == '.') {
			continue
		}
		b.WriteString(text[last:k])
		b.WriteString(redact.Mask)
		last, i = end, end
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

func isPrioritySep(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '"', '\'', '\\', ':', '=', '[', '(':
		return true
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// indexFold is strings.Index ignoring ASCII case; word is lower case.
func indexFold(s, word string) int {
	for i := 0; i+len(word) <= len(s); i++ {
		if c := s[i] | 0x20; c != word[0] {
			continue
		}
		if strings.EqualFold(s[i:i+len(word)], word) {
			return i
		}
	}
	return -1
}
