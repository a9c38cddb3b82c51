// Package jsonscan walks JSON objects without decoding them: one object's
// top-level members as raw key and value slices, values skipped by
// counting brackets outside strings. It is lenient (numbers, literals and
// string contents are not validated) and never allocates; callers that
// need strict validation run json.Valid first.
//
// It serves the hot paths that only need a few members of a large
// document: usage in an engine's answer (sse), the top-level fields of a
// client's request (gateway).
package jsonscan

import "bytes"

// ParseInt parses a JSON integer; anything else (fractions, exponents,
// strings, null, overflow) gives 0.
func ParseInt(b []byte) int64 {
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

// Object iterates over the members of a JSON object.
type Object struct {
	b       []byte
	i       int
	started bool
	done    bool
	bad     bool // the object is malformed; set when Next returns false
}

// NewObject starts iterating over the object in b (leading whitespace
// allowed); ok is false if b does not start an object.
func NewObject(b []byte) (Object, bool) {
	i := SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return Object{}, false
	}
	return Object{b: b, i: i + 1}, true
}

// Next returns the next member's raw key (between the quotes, escapes left
// as they are) and raw value. It returns more=false at the closing brace or
// on malformed input, which sets it.bad.
func (it *Object) Next() (key, val []byte, more bool) {
	if it.done || it.bad {
		return nil, nil, false
	}
	b := it.b
	i := SkipWS(b, it.i)
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
		i = SkipWS(b, i+1)
	}
	it.started = true
	if i >= len(b) || b[i] != '"' {
		it.bad = true
		return nil, nil, false
	}
	e := SkipString(b, i)
	if e < 0 {
		it.bad = true
		return nil, nil, false
	}
	key = b[i+1 : e-1]
	i = SkipWS(b, e)
	if i >= len(b) || b[i] != ':' {
		it.bad = true
		return nil, nil, false
	}
	i = SkipWS(b, i+1)
	e = SkipValue(b, i)
	if e < 0 {
		it.bad = true
		return nil, nil, false
	}
	it.i = e
	return key, b[i:e], true
}

func SkipWS(b []byte, i int) int {
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

// SkipString returns the index just after the string starting at b[i]
// (which is '"'), or -1 if it is not terminated. Keys and most values in
// chunks are short, so a plain loop beats calling IndexByte per string;
// long strings (message content) switch to IndexByte.
func SkipString(b []byte, i int) int {
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

// skipLongString continues SkipString at b[i], inside the string and not
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

// SkipValue returns the index just after the value starting at b[i], or -1.
// Containers are skipped by counting brackets outside strings.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = SkipString(b, i); i < 0 {
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

// Bad reports whether iteration stopped on malformed input.
func (it *Object) Bad() bool { return it.bad }

// Member returns the bounds b[start:end] of the value of the first
// top-level member of the object in b whose raw key (escapes left as they
// are) is name; ok is false if b is not an object, is malformed before that
// member, or has no such member. It does not allocate.
func Member(b []byte, name string) (start, end int, ok bool) {
	it, ok := NewObject(b)
	if !ok {
		return 0, 0, false
	}
	for {
		k, v, more := it.Next()
		if !more {
			return 0, 0, false
		}
		if string(k) == name {
			// v is b[i:e]: its capacity tells where it starts.
			start = cap(b) - cap(v)
			return start, start + len(v), true
		}
	}
}
