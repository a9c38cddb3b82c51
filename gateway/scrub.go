package gateway

import (
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
//     differ, so a client sees only its own names. Both names are matched
//     in one left-to-right pass, the longer one first, so a client name
//     that contains the upstream name (or the other way round) is neither
//     replaced twice nor cut in half.
//
// The zero scrubber returns text unchanged.
type scrubber struct {
	secrets []string          // for redact.String
	prio    string            // the gateway's priority as sent; "" = none sent
	models  *strings.Replacer // upstream → client model name; nil = same name
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
			s.prio = strconv.Itoa(x.priority)
		}
		if x.rq != nil {
			s.models = modelReplacer(x.rt.upstreamModel, x.rq.model)
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

// modelReplacer replaces upstream by client, or is nil when they are equal.
func modelReplacer(upstream, client string) *strings.Replacer {
	if upstream == "" || client == "" || upstream == client {
		return nil
	}
	// At one position strings.Replacer tries its pairs in argument order:
	// the longer name first, so the shorter one never matches inside it.
	if len(client) >= len(upstream) {
		return strings.NewReplacer(client, client, upstream, client)
	}
	return strings.NewReplacer(upstream, client, client, client)
}

// String returns text scrubbed by the rule of scrubber.
func (s *scrubber) String(text string) string {
	if s == nil {
		return text
	}
	text = redact.String(text, s.secrets...)
	if s.prio != "" {
		text = maskPriority(text, s.prio)
	}
	if s.models != nil {
		text = s.models.Replace(text)
	}
	return text
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
