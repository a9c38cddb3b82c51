package sse

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/go-llmflow/llmflow/internal/jsonscan"
)

// Options configure Copy. The zero value drops the final usage chunk,
// limits events to DefaultMaxEventBytes and flushes nothing.
type Options struct {
	// KeepUsage forwards the final usage chunk (non-null "usage" and
	// "choices": []). Set it when the client asked for
	// stream_options.include_usage; otherwise the chunk is dropped (the
	// gateway may have forced usage on upstream for its own accounting).
	// Usage is reported in Result either way.
	KeepUsage bool

	// MaxEventBytes limits the size of one event, line endings included.
	// A larger event stops Copy with ErrEventTooLarge. 0 means
	// DefaultMaxEventBytes (1 MiB).
	MaxEventBytes int

	// Flush sends what was written to dst to the client now (for HTTP:
	// http.NewResponseController(w).Flush). Copy calls it before it
	// waits for the engine's next bytes, and before it returns: no event
	// waits for another one that has not arrived, and the events that
	// arrived together (one read from src) go out in one write. nil
	// means no flushing. A Flush error stops Copy with a *WriteError.
	Flush func() error

	// LeaveEnd: when the stream ends ([DONE], or with Responses its
	// terminal event), Copy returns without flushing what it wrote since
	// its last wait, the end included. The caller flushes once it has
	// settled the request (an HTTP handler's return does): its client
	// cannot see the stream end before, and the end leaves in one write
	// with the answer's last bytes (HTTP/1.1's last chunk). Copy still
	// flushes before every wait, and when it returns for any other reason.
	LeaveEnd bool

	// Model, when set and different from UpstreamModel, replaces the
	// string value of the top-level "model" member of every forwarded
	// data event: the client sees the model name it asked for, not the
	// engine's. With equal names (or Model empty) events are not looked
	// at for it, at no cost. Only single-line data events (what engines
	// send) are rewritten; others are forwarded as they are.
	Model string

	// UpstreamModel is the name the engine serves the model under.
	UpstreamModel string

	// OnEvent, when not nil, is called when a whole event has been read,
	// before it is written (the gateway's idle timer counts events, not
	// bytes).
	OnEvent func()

	// ScrubError, when not nil, rewrites the data of an error event (a
	// non-null top-level "error") before it is forwarded: the gateway
	// removes from an engine's error text what it put in the request
	// itself. It must return one line of JSON.
	ScrubError func(data []byte) []byte

	// DropChunkUsage removes the "usage" member of content chunks (the
	// running count vLLM's continuous_usage_stats puts in every chunk)
	// before they are forwarded, cutting its exact bytes: a client that did
	// not ask for it gets the chunks the engine sends without it. The count
	// is still reported in Result.
	DropChunkUsage bool

	// MaxDeltas, when > 0, stops Copy with ErrTooManyDeltas at the first
	// chunk with choices beyond that many (not forwarded): an engine that
	// generates past the output limit it was given is cut off.
	MaxDeltas int

	// Responses reads the stream as the Responses API's typed events
	// (responses.go): it is done at its terminal event (response.completed,
	// .incomplete or .failed), whose response's usage is the Result's;
	// delta events count as Deltas; nothing is dropped (KeepUsage and
	// DropChunkUsage do not apply); Model renames the model of each event's
	// response; ScrubError rewrites the data of an "error" or
	// response.failed event, its "event:" line kept.
	Responses bool
}

// Result describes a stream that Copy forwarded.
type Result struct {
	// Usage is the last usage object seen, in any chunk (with vLLM's
	// continuous_usage_stats every chunk has a cumulative one). It is valid
	// when HasUsage is set.
	Usage    Usage
	HasUsage bool

	// Done is set when the stream ended on "data: [DONE]" (with
	// Options.Responses, on its terminal event). When it is not
	// set the stream was cut short (or the engine ended it after an error,
	// as llama-server does), and the final usage chunk may be missing.
	Done bool

	// ErrorEvent is set when an event's JSON had a non-null top-level
	// "error" member (vLLM and llama-server: data: {"error":{...}}).
	ErrorEvent bool

	// Deltas counts forwarded chunks whose "choices" array was not empty.
	// When no usage came, it is a lower bound for the completion tokens.
	Deltas int

	// Events counts forwarded events that carried data, [DONE] included.
	// Comment-only events (keep-alives) are forwarded but not counted, nor
	// is an incomplete last event.
	Events int

	// Bytes counts the bytes written to dst.
	Bytes int64
}

// DoneHook is implemented by a dst that must act when the stream is
// complete but before its client can know it: Copy calls BeforeDone with
// the Result (Done set, the [DONE] event counted, not yet written) when the
// [DONE] event arrives, then writes it. The gateway makes its accounting
// record durable there, so that a client that saw [DONE] was accounted
// even if the process dies at once. Like io.Copy's WriterTo, it is found
// by a type assertion on dst: no allocation, nothing for other writers.
type DoneHook interface {
	BeforeDone(Result)
}

// WriteError wraps an error from writing to dst or from Options.Flush:
// the client went away. Copy's other errors come from reading the
// upstream, or are ErrEventTooLarge.
type WriteError struct {
	Err error
}

func (e *WriteError) Error() string { return "sse: write to client: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// readerPool recycles Readers (and their read buffers) across Copy calls.
// Copy never lets Raw or Data escape, so reuse is safe.
var readerPool sync.Pool

// maxPooledRaw bounds the event buffer a pooled Reader may keep, so that one
// huge event does not pin memory forever.
const maxPooledRaw = 64 << 10

// ErrTooManyDeltas is Copy's error when a stream passes Options.MaxDeltas.
var ErrTooManyDeltas = errors.New("sse: more chunks with choices than the output limit allows")

// Copy reads events from src and writes each one to dst as soon as it is
// complete, until the [DONE] event, the end of src, or an error, and calls
// opt.Flush once the events already read are written: before it waits for
// src, and before it returns (unless opt.LeaveEnd leaves the end to the
// caller). It holds at most one event in memory, never the whole stream.
//
// Events are forwarded byte for byte, line endings included, with one
// exception: the final usage chunk (a non-null "usage" and "choices": [],
// which vLLM, llama-server and OpenAI send just before [DONE]) is dropped
// unless opt.KeepUsage is set. Comments (": ping") and other fields
// (event:, id:, retry:) are forwarded as they are. The [DONE] event (data
// starting with "[DONE]", as the OpenAI SDKs test it) is forwarded, then
// Copy returns without reading src any further; when dst is a DoneHook,
// its BeforeDone is called first.
//
// If src ends without [DONE], Copy returns Result.Done == false and a nil
// error; an incomplete last event (no blank line after it) is forwarded as
// it is but not interpreted.
//
// A write or flush error is returned as a *WriteError. Any other error is
// from reading src (the upstream broke), or is ErrEventTooLarge; the event
// being read then is not forwarded. The Result is valid in every case.
//
// Only chunks that may carry usage or an error are decoded, and only
// partly: ordinary content chunks are classified with a few byte searches.
func Copy(dst io.Writer, src io.Reader, opt Options) (res Result, err error) {
	rd, _ := readerPool.Get().(*Reader)
	if rd == nil {
		rd = NewReader(src, opt.MaxEventBytes)
	} else {
		rd.Reset(src, opt.MaxEventBytes)
	}
	rd.FlushBeforeWait(opt.Flush) // and at the end (the deferred Flush)
	write := func(p []byte) error { return rd.write(dst, p, &res) }
	defer func() {
		if _, failed := err.(*WriteError); !failed && !(opt.LeaveEnd && res.Done && err == nil) {
			if ferr := rd.Flush(); ferr != nil && err == nil {
				err = ferr
			}
		}
		rd.Reset(nil, 0)
		if cap(rd.raw) > maxPooledRaw {
			rd.raw = nil
		}
		if cap(rd.data) > maxPooledRaw {
			rd.data = nil
		}
		readerPool.Put(rd)
	}()

	// rename is the client's model name as a JSON string, nil when events
	// keep the engine's; out holds a renamed event, reused across events,
	// cut one whose usage was cut out.
	var rename, out, cut []byte
	if opt.Model != "" && opt.Model != opt.UpstreamModel {
		rename, _ = json.Marshal(opt.Model) // a string always marshals
	}
	classify, rn := inspect, renameModel
	if opt.Responses {
		classify, rn = inspectResponse, renameResponseModel
	}
	for {
		ev, err := rd.Next()
		switch err {
		case nil:
		case io.EOF:
			return res, nil
		case io.ErrUnexpectedEOF:
			return res, write(ev.Raw)
		default:
			return res, err
		}
		if opt.OnEvent != nil {
			opt.OnEvent()
		}
		if ev.Data == nil {
			if err := write(ev.Raw); err != nil {
				return res, err
			}
			continue
		}
		c := classify(ev.Data)
		if c.hasUsage {
			res.Usage, res.HasUsage = c.usage, true
		}
		raw, scrubbed := ev.Raw, false
		if c.isError {
			res.ErrorEvent = true
			if opt.ScrubError != nil {
				data := opt.ScrubError(ev.Data)
				if off := dataOffset(ev.Raw, ev.Data); opt.Responses && off >= 0 {
					// the event's other lines (event: error) as they are
					out = append(append(append(out[:0], ev.Raw[:off]...), data...), ev.Raw[off+len(ev.Data):]...)
				} else {
					out = append(append(append(out[:0], "data: "...), data...), "\n\n"...)
				}
				raw, scrubbed = out, true
			}
		}
		if c.done {
			res.Done = true
			res.Events++
			if h, ok := dst.(DoneHook); ok {
				h.BeforeDone(res)
			}
			if !scrubbed && rename != nil {
				raw, _ = rn(out, raw, ev.Data, rename)
			}
			return res, write(raw)
		}
		if scrubbed { // the scrubber wrote the client's model name
			res.Events++
			if err := write(raw); err != nil {
				return res, err
			}
			continue
		}
		if c.hasUsage && c.emptyChoices && !opt.KeepUsage {
			continue
		}
		if c.choices {
			if res.Deltas++; opt.MaxDeltas > 0 && res.Deltas > opt.MaxDeltas {
				res.Deltas--
				return res, ErrTooManyDeltas
			}
		}
		res.Events++
		if c.hasUsage && c.choices && opt.DropChunkUsage {
			raw, cut = cutMember(cut, raw, ev.Data, "usage")
		}
		if rename != nil {
			data := ev.Data
			if &raw[0] != &ev.Raw[0] { // cut: rename in what is left
				data = raw[dataOffset(raw, []byte("{")):]
				data = data[:bytes.LastIndexByte(data, '}')+1]
			}
			raw, out = rn(out, raw, data, rename)
		}
		if err := write(raw); err != nil {
			return res, err
		}
	}
}

// renameModel returns raw with the string value of data's top-level
// "model" member replaced by name (a JSON string), built in buf; or raw
// itself when there is nothing to replace, or when data is not found whole
// after "data:" in raw (an event of several data lines). The second result
// is the buffer to reuse for the next event.
func renameModel(buf, raw, data, name []byte) ([]byte, []byte) {
	s, e, ok := jsonscan.Member(data, "model")
	if !ok || data[s] != '"' || bytes.Equal(data[s:e], name) {
		return raw, buf
	}
	off := dataOffset(raw, data)
	if off < 0 {
		return raw, buf
	}
	buf = append(buf[:0], raw[:off+s]...)
	buf = append(buf, name...)
	buf = append(buf, raw[off+e:]...)
	return buf, buf
}

// cutMember returns raw (an event whose data is data) without the
// top-level member name of data and its separating comma, built in buf; or
// raw itself when the member is absent, spelled otherwise than plainly, or
// data is not found whole in raw. The second result is the buffer to reuse.
func cutMember(buf, raw, data []byte, name string) ([]byte, []byte) {
	s, e, ok := jsonscan.Member(data, name)
	off := dataOffset(raw, data)
	if !ok || off < 0 {
		return raw, buf
	}
	// back from the value over `"name"\s*:\s*`
	i := s
	for i > 0 && isSpace(data[i-1]) {
		i--
	}
	if i == 0 || data[i-1] != ':' {
		return raw, buf
	}
	i--
	for i > 0 && isSpace(data[i-1]) {
		i--
	}
	key := `"` + name + `"`
	if i < len(key) || string(data[i-len(key):i]) != key {
		return raw, buf
	}
	from, to := i-len(key), e
	j := from
	for j > 0 && isSpace(data[j-1]) {
		j--
	}
	if j > 0 && data[j-1] == ',' {
		from = j - 1 // `,"usage":{…}` after another member
	} else {
		k := jsonscan.SkipWS(data, e)
		if k < len(data) && data[k] == ',' {
			to = jsonscan.SkipWS(data, k+1) // the first member: `"usage":{…},`
		}
	}
	buf = append(buf[:0], raw[:off+from]...)
	buf = append(buf, raw[off+to:]...)
	return buf, buf
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

var dataField = []byte("data:")

// dataOffset returns the index in raw of a "data:" line whose value is
// data, whole, or -1.
func dataOffset(raw, data []byte) int {
	for from := 0; from < len(raw); {
		i := bytes.Index(raw[from:], dataField)
		if i < 0 {
			return -1
		}
		i += from + len(dataField)
		if i < len(raw) && raw[i] == ' ' {
			i++
		}
		if bytes.HasPrefix(raw[i:], data) {
			return i
		}
		from = i
	}
	return -1
}

// write writes p, an event, to dst, to be flushed before rd waits for
// its source (FlushBeforeWait).
func (rd *Reader) write(dst io.Writer, p []byte, res *Result) error {
	n, err := dst.Write(p)
	res.Bytes += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &WriteError{Err: err}
	}
	rd.Written()
	return nil
}

// chunk is what Copy needs to know about one data payload.
type chunk struct {
	done         bool  // [DONE]
	choices      bool  // a non-empty top-level "choices" array
	emptyChoices bool  // "choices": []
	hasUsage     bool  // a top-level "usage" object
	usage        Usage //
	isError      bool  // a non-null top-level "error"
}

var doneMarker = []byte("[DONE]")

// Key patterns, searched without their leading quote: bytes.Index skips
// ahead with IndexByte on the first byte of the pattern, and in JSON a quote
// is the most common byte of all.
var (
	usageTail       = []byte(`usage"`)
	errorTail       = []byte(`error"`)
	choicesTail     = []byte(`choices"`)
	choicesFullTail = []byte(`choices":[{`)
	choicesNullTail = []byte(`choices":[]`)
	nullValue       = []byte(`:null`)
)

// indexKey returns the index of the first `"`+tail in data at or after
// from, or -1. The result is the index of the quote.
func indexKey(data []byte, from int, tail []byte) int {
	for from < len(data) {
		i := bytes.Index(data[from:], tail)
		if i < 0 {
			return -1
		}
		i += from
		if i > 0 && data[i-1] == '"' {
			return i - 1
		}
		from = i + 1
	}
	return -1
}

// inspect classifies one event's data.
//
// Fast path: in valid JSON a quote inside a string is escaped, so the bytes
// `"usage"` and `"error"` can only appear as a key or as a whole string
// value. A chunk with neither (every ordinary content chunk) cannot carry
// usage or an error and is classified by byte searches alone: compact
// `"choices":[{` means it carries choices. `"usage":null`, which OpenAI
// puts on every chunk, is recognised without decoding. Anything else goes
// through the JSON scanner, which looks at top-level members only.
func inspect(data []byte) (c chunk) {
	if bytes.HasPrefix(data, doneMarker) {
		c.done = true
		return c
	}
	if i := jsonscan.SkipWS(data, 0); i >= len(data) || data[i] != '{' {
		return c // not a JSON object: forward as it is
	}
	slow := false
	if i := indexKey(data, 0, usageTail); i >= 0 {
		// The OpenAI shape is one "usage":null on a content chunk.
		end := i + 1 + len(usageTail)
		slow = !bytes.HasPrefix(data[end:], nullValue) || indexKey(data, end, usageTail) >= 0
	}
	if !slow && indexKey(data, 0, errorTail) < 0 {
		i := indexKey(data, 0, choicesTail)
		switch {
		case i < 0:
			return c
		case bytes.HasPrefix(data[i+1:], choicesFullTail):
			c.choices = true
			return c
		case bytes.HasPrefix(data[i+1:], choicesNullTail) && indexKey(data, i+1, choicesTail) < 0:
			c.emptyChoices = true
			return c
		}
	}
	return inspectSlow(data)
}

// inspectSlow classifies data by walking its top-level members. Malformed
// JSON gives a zero chunk (an ordinary event, forwarded as it is).
func inspectSlow(data []byte) (c chunk) {
	it, ok := jsonscan.NewObject(data)
	if !ok {
		return chunk{}
	}
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch string(k) {
		case "choices":
			c.choices, c.emptyChoices = false, false
			if len(v) > 0 && v[0] == '[' {
				i := jsonscan.SkipWS(v, 1)
				c.emptyChoices = i < len(v) && v[i] == ']'
				c.choices = !c.emptyChoices
			}
		case "usage":
			c.usage, c.hasUsage = parseUsageObject(v)
		case "error":
			c.isError = string(v) != "null"
		}
	}
	if it.Bad() {
		return chunk{}
	}
	return c
}
