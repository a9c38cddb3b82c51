package sse

import (
	"bytes"
	"encoding/json"
)

// Usage is the token usage of one request, as the engine reported it.
// Fields the engine left out are 0; TotalTokens is not computed.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64 // absent for embeddings
	TotalTokens      int64
	// CachedTokens is prompt_tokens_details.cached_tokens. vLLM omits it
	// unless it is non-zero (and only with --enable-prompt-tokens-details);
	// llama-server always sends it. Absent means 0.
	CachedTokens int64
}

// ParseUsage extracts the top-level "usage" object of a JSON response body
// (a non-streaming chat, completion or embeddings answer). ok is false when
// the body is not valid JSON, is not an object, or has no "usage" object
// ("usage":null included). If "usage" appears several times the last one
// wins. Token counts that are not JSON integers (or overflow int64) count
// as 0.
func ParseUsage(body []byte) (u Usage, ok bool) {
	if !json.Valid(body) {
		return Usage{}, false
	}
	it, ok := newObjIter(body)
	if !ok {
		return Usage{}, false
	}
	var val []byte
	for {
		k, v, more := it.next()
		if !more {
			break
		}
		if string(k) == "usage" {
			val = v
		}
	}
	if it.bad || val == nil {
		return Usage{}, false
	}
	return parseUsageObject(val)
}

// parseUsageObject decodes a usage object; ok is false if v is not an
// object (null included) or is malformed.
func parseUsageObject(v []byte) (u Usage, ok bool) {
	it, ok := newObjIter(v)
	if !ok {
		return Usage{}, false
	}
	for {
		k, v, more := it.next()
		if !more {
			break
		}
		switch string(k) {
		case "prompt_tokens":
			u.PromptTokens = parseInt(v)
		case "completion_tokens":
			u.CompletionTokens = parseInt(v)
		case "total_tokens":
			u.TotalTokens = parseInt(v)
		case "prompt_tokens_details":
			u.CachedTokens = 0
			if d, ok := newObjIter(v); ok {
				for {
					k, v, more := d.next()
					if !more {
						break
					}
					if string(k) == "cached_tokens" {
						u.CachedTokens = parseInt(v)
					}
				}
			}
		}
	}
	if it.bad {
		return Usage{}, false
	}
	return u, true
}

// parseInt parses a JSON integer; anything else (fractions, exponents,
// strings, null, overflow) gives 0.
func parseInt(b []byte) int64 {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0
		}
		return -int64(n)
	}
	if n > 1<<63-1 {
		return 0
	}
	return int64(n)
}

// A minimal JSON scanner: it walks one object's members and skips values
// without decoding them. It is lenient (it does not validate numbers,
// literals or string contents) and never allocates; callers that need
// strict validation run json.Valid first.

// objIter iterates over the members of a JSON object.
type objIter struct {
	b       []byte
	i       int
	started bool
	done    bool
	bad     bool // the object is malformed; set when next returns false
}

// newObjIter starts iterating over the object in b (leading whitespace
// allowed); ok is false if b does not start an object.
func newObjIter(b []byte) (objIter, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return objIter{}, false
	}
	return objIter{b: b, i: i + 1}, true
}

// next returns the next member's raw key (between the quotes, escapes left
// as they are) and raw value. It returns more=false at the closing brace or
// on malformed input, which sets it.bad.
func (it *objIter) next() (key, val []byte, more bool) {
	if it.done || it.bad {
		return nil, nil, false
	}
	b := it.b
	i := skipWS(b, it.i)
	if i < len(b) && b[i] == '}' {
		it.done = true
		it.i = i + 1
		return nil, nil, false
	}
	if it.started {
		if i >= len(b) || b[i] != ',' {
			it.bad = true
			return nil, nil, false
		}
		i = skipWS(b, i+1)
	}
	it.started = true
	if i >= len(b) || b[i] != '"' {
		it.bad = true
		return nil, nil, false
	}
	e := skipString(b, i)
	if e < 0 {
		it.bad = true
		return nil, nil, false
	}
	key = b[i+1 : e-1]
	i = skipWS(b, e)
	if i >= len(b) || b[i] != ':' {
		it.bad = true
		return nil, nil, false
	}
	i = skipWS(b, i+1)
	e = skipValue(b, i)
	if e < 0 {
		it.bad = true
		return nil, nil, false
	}
	it.i = e
	return key, b[i:e], true
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just after the string starting at b[i]
// (which is '"'), or -1 if it is not terminated. Keys and most values in
// chunks are short, so a plain loop beats calling IndexByte per string;
// long strings (message content) switch to IndexByte.
func skipString(b []byte, i int) int {
	i++
	for n := 0; i < len(b); n++ {
		if n == 32 {
			return skipLongString(b, i)
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return -1
}

// skipLongString continues skipString at b[i], inside the string and not
// inside an escape. It jumps from quote to quote with IndexByte; a quote is
// escaped when an odd run of backslashes precedes it.
func skipLongString(b []byte, i int) int {
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		j += i
		k := j
		for k > i && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
}

// skipValue returns the index just after the value starting at b[i], or -1.
// Containers are skipped by counting brackets outside strings.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	case '}', ']', ',', ':':
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
			if j == i {
				return -1
			}
			return j
		}
		j++
	}
	return j
}
