package sse_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sse"
)

// responsesOptions are the Copy options of the Responses golden files: the
// client asked for "llama-8b", which the engine serves under its own name.
func responsesOptions() sse.Options {
	return sse.Options{Responses: true, Model: "llama-8b", UpstreamModel: "meta-llama/Llama-3.1-8B-Instruct"}
}

func copyResponses(tb testing.TB, src io.Reader) (string, sse.Result) {
	tb.Helper()
	var dst recorder
	opt := responsesOptions()
	opt.Flush = dst.Flush
	res, err := sse.Copy(&dst, dst.source(src), opt)
	if err != nil {
		tb.Fatalf("Copy: %v", err)
	}
	dst.check(tb)
	if res.Bytes != int64(dst.Len()) {
		tb.Errorf("Result.Bytes = %d, wrote %d", res.Bytes, dst.Len())
	}
	return dst.String(), res
}

// TestCopyResponses_Golden: Responses API streams (testdata/responses/*.sse)
// are relayed event by event up to their terminal event, with the model of
// each event's response renamed, the usage of the terminal event taken and
// delta events counted. Every chunking gives the same output and Result.
func TestCopyResponses_Golden(t *testing.T) {
	files, err := filepath.Glob("testdata/responses/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".sse")
		t.Run(name, func(t *testing.T) {
			in := readFile(t, file)
			out, res := copyResponses(t, bytes.NewReader(in))
			base := strings.TrimSuffix(file, ".sse")
			resJSON, err := json.MarshalIndent(res, "", "\t")
			if err != nil {
				t.Fatal(err)
			}
			resJSON = append(resJSON, '\n')
			if *update {
				writeFile(t, base+".golden", []byte(out))
				writeFile(t, base+".result.json", resJSON)
			} else {
				compareFile(t, base+".golden", []byte(out))
				compareFile(t, base+".result.json", resJSON)
			}
			if strings.Contains(out, "meta-llama") {
				t.Errorf("the engine's model name reached the client")
			}
			for how, r := range readers(in) {
				got, gotRes := copyResponses(t, r())
				if got != out || gotRes != res {
					t.Errorf("%s: differs from a whole read", how)
				}
			}
			for k := 0; k <= len(in); k += 7 {
				got, gotRes := copyResponses(t, splitAt(in, k))
				if got != out || gotRes != res {
					t.Errorf("split at %d: differs from a whole read", k)
				}
			}
		})
	}
}

// The terminal event is handed to a DoneHook before it is written, with
// the usage it carries.
func TestCopyResponses_DoneHook(t *testing.T) {
	in := readFile(t, "testdata/responses/vllm_completed.sse")
	dst := &hookRecorder{}
	if _, err := sse.Copy(dst, bytes.NewReader(in), responsesOptions()); err != nil {
		t.Fatal(err)
	}
	if dst.calls != 1 || !dst.res.Done || !dst.res.HasUsage || dst.res.Usage.PromptTokens != 42 {
		t.Fatalf("BeforeDone %d calls, %+v", dst.calls, dst.res)
	}
	if strings.Contains(dst.before, "response.completed") || !strings.Contains(dst.String(), "response.completed") {
		t.Fatal("the terminal event was written before BeforeDone")
	}
}

type hookRecorder struct {
	bytes.Buffer
	calls  int
	res    sse.Result
	before string
}

func (h *hookRecorder) BeforeDone(r sse.Result) {
	h.calls++
	h.res = r
	h.before = h.String()
}

func TestParseResponseUsage(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		want   sse.Usage
		wantOK bool
	}{
		{"vLLM", `{"id":"resp_1","object":"response","model":"m","output":[{"type":"message","content":[{"type":"output_text","text":"{\"usage\":{\"input_tokens\":1}}"}]}],` +
			`"usage":{"input_tokens":42,"input_tokens_details":{"cached_tokens":32},"output_tokens":18,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":60}}`,
			sse.Usage{PromptTokens: 42, CompletionTokens: 18, TotalTokens: 60, CachedTokens: 32}, true},
		{"no details", `{"usage":{"input_tokens":7,"output_tokens":1,"total_tokens":8}}`, sse.Usage{PromptTokens: 7, CompletionTokens: 1, TotalTokens: 8}, true},
		{"chat names are not read", `{"usage":{"prompt_tokens":7,"completion_tokens":1}}`, sse.Usage{NoPrompt: true, NoCompletion: true}, true},
		{"null", `{"usage":null}`, sse.Usage{}, false},
		{"absent", `{"status":"completed"}`, sse.Usage{}, false},
		{"malformed", `{"usage":{"input_tokens":1.5,"output_tokens":2}}`, sse.Usage{CompletionTokens: 2, Malformed: true}, true},
		{"last wins", `{"usage":{"input_tokens":1},"usage":{"input_tokens":2}}`, sse.Usage{PromptTokens: 2, NoCompletion: true}, true},
		{"null counts", `{"usage":{"input_tokens":null,"output_tokens":null}}`, sse.Usage{NoPrompt: true, NoCompletion: true}, true},
		{"not an object", `[1]`, sse.Usage{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := sse.ParseResponseUsage([]byte(tt.body))
			if ok != tt.wantOK || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// refParseResponseUsage is the naive reference for ParseResponseUsage, on
// encoding/json.
func refParseResponseUsage(body []byte) (sse.Usage, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return sse.Usage{}, false
	}
	var u map[string]json.RawMessage
	if json.Unmarshal(top["usage"], &u) != nil || u == nil {
		return sse.Usage{}, false
	}
	malformed := false
	num := func(m map[string]json.RawMessage, k string) int64 {
		v, ok := m[k]
		if !ok || string(v) == "null" {
			return 0
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			malformed = true
			return 0
		}
		return n
	}
	var d map[string]json.RawMessage
	json.Unmarshal(u["input_tokens_details"], &d)
	us := sse.Usage{
		PromptTokens:     num(u, "input_tokens"),
		CompletionTokens: num(u, "output_tokens"),
		TotalTokens:      num(u, "total_tokens"),
		CachedTokens:     num(d, "cached_tokens"),
	}
	us.Malformed = malformed
	absent := func(k string) bool { v, ok := u[k]; return !ok || string(v) == "null" }
	us.NoPrompt, us.NoCompletion = absent("input_tokens"), absent("output_tokens")
	return us, true
}

func FuzzParseResponseUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"input_tokens":42,"input_tokens_details":{"cached_tokens":32},"output_tokens":18,"total_tokens":60}}`))
	f.Add([]byte(`{"usage":null}`))
	f.Add([]byte(`{"usage":{"input_tokens":1e3,"output_tokens":"x","input_tokens_details":{"cached_tokens":99999999999999999999}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if bytes.IndexByte(body, '\\') >= 0 {
			return // keys are compared raw (see FuzzParseUsage)
		}
		got, ok := sse.ParseResponseUsage(body)
		if !json.Valid(body) {
			return // lenient on malformed bodies: only must not panic
		}
		want, wantOK := refParseResponseUsage(body)
		if ok != wantOK || got != want {
			t.Fatalf("ParseResponseUsage(%q) = %+v, %v; reference %+v, %v", body, got, ok, want, wantOK)
		}
	})
}

// FuzzCopyResponses: whatever a Responses stream holds, Copy forwards its
// events unchanged up to the first terminal event (renaming aside), in any
// chunking, and its Result agrees with a reference on encoding/json.
func FuzzCopyResponses(f *testing.F) {
	// Not vllm_completed: with it as a seed, go test -fuzz ran no input
	// past the baseline here (not understood; no input hangs Copy), and
	// its escapes leave the Result unchecked anyway.
	for _, name := range []string{"vllm_incomplete", "failed", "done_after"} {
		b, err := os.ReadFile(filepath.Join("testdata", "responses", name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3}}}\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		opt := sse.Options{Responses: true, MaxEventBytes: len(in) + 1}
		var dst bytes.Buffer
		res, err := sse.Copy(&dst, bytes.NewReader(in), opt)
		if err != nil {
			t.Fatalf("Copy: %v", err)
		}
		// Reference: the input up to and including the first terminal event.
		evs, tail := refParse(string(in))
		var want strings.Builder
		var ref sse.Result
		// The reference decodes keys and values, Copy compares them raw,
		// and is lenient on malformed JSON: compare only where both see
		// the same.
		checkable := !bytes.Contains(in, []byte(`\`))
		for _, e := range evs {
			want.WriteString(e.Raw)
			if !e.HasData {
				continue
			}
			if d := strings.TrimLeft(e.Data, " \t\r\n"); strings.HasPrefix(d, "{") && !json.Valid([]byte(d)) {
				checkable = false
			}
			typ, usage, hasUsage, isErr, terminal := refResponseEvent(e.Data)
			if hasUsage {
				ref.Usage, ref.HasUsage = usage, true
			}
			ref.ErrorEvent = ref.ErrorEvent || isErr
			if strings.HasSuffix(typ, ".delta") {
				ref.Deltas++
			}
			if terminal || strings.HasPrefix(e.Data, "[DONE]") {
				ref.Done = true
				break
			}
		}
		if !ref.Done {
			want.WriteString(tail)
		}
		if checkable && dst.String() != want.String() {
			t.Fatalf("output is not the input up to its terminal event:\n%s", cmp.Diff(want.String(), dst.String()))
		}
		if checkable && (res.Done != ref.Done || res.Deltas != ref.Deltas ||
			res.ErrorEvent != ref.ErrorEvent || res.HasUsage != ref.HasUsage || (ref.HasUsage && res.Usage != ref.Usage)) {
			t.Fatalf("Result %+v, reference %+v", res, ref)
		}
		got, gotRes := func() (string, sse.Result) {
			var d bytes.Buffer
			r, err := sse.Copy(&d, iotest.OneByteReader(bytes.NewReader(in)), opt)
			if err != nil {
				t.Fatalf("Copy: %v", err)
			}
			return d.String(), r
		}()
		if got != dst.String() || gotRes != res {
			t.Fatalf("one byte at a time differs")
		}
		// Renaming changes no Result but Bytes, and is idempotent.
		ren := sse.Options{Responses: true, MaxEventBytes: len(in) + 64, Model: "client", UpstreamModel: "up/m"}
		var r1, r2 bytes.Buffer
		renRes, err := sse.Copy(&r1, bytes.NewReader(in), ren)
		if err != nil {
			t.Fatalf("Copy with Model: %v", err)
		}
		renRes.Bytes, res.Bytes = 0, 0
		if renRes != res {
			t.Fatalf("Model changed the Result: %+v, %+v", res, renRes)
		}
		if _, err := sse.Copy(&r2, bytes.NewReader(r1.Bytes()), ren); err != nil || r2.String() != r1.String() {
			t.Fatalf("renaming is not idempotent: %v\n%s", err, cmp.Diff(r1.String(), r2.String()))
		}
	})
}

// refResponseEvent classifies one event's data with encoding/json, for
// data whose first members are unique (it decodes into a map).
func refResponseEvent(data string) (typ string, u sse.Usage, hasUsage, isErr, terminal bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal([]byte(data), &top) != nil || top == nil {
		return "", sse.Usage{}, false, false, false
	}
	raw, ok := top["type"]
	if !ok {
		e, ok := top["error"]
		return "", sse.Usage{}, false, ok && string(e) != "null", false
	}
	json.Unmarshal(raw, &typ)
	switch typ {
	case "response.completed", "response.incomplete":
		terminal = true
	case "response.failed":
		terminal, isErr = true, true
	case "error":
		isErr = true
	}
	if terminal {
		var r map[string]json.RawMessage
		if json.Unmarshal(top["response"], &r) == nil && r != nil {
			if _, ok := r["usage"]; ok {
				u, hasUsage = refParseResponseUsage([]byte(`{"usage":` + string(r["usage"]) + `}`))
			}
		}
	}
	return typ, u, hasUsage, isErr, terminal
}

// responsesStream is a vLLM Responses stream of n text deltas: 4 events
// before them, 4 after (the last, response.completed, with usage).
func responsesStream(n int) []byte {
	in, err := os.ReadFile(filepath.Join("testdata", "responses", "vllm_completed.sse"))
	if err != nil {
		panic(err)
	}
	events := strings.SplitAfter(string(in), "\n\n")
	delta := events[4] // the first output_text.delta
	var b strings.Builder
	b.WriteString(strings.Join(events[:4], ""))
	for range n {
		b.WriteString(delta)
	}
	b.WriteString(strings.Join(events[7:], ""))
	return []byte(b.String())
}

// BenchmarkCopy_Responses: a 500-delta Responses stream, the model renamed
// in the events that carry the response (every event is walked once).
func BenchmarkCopy_Responses(b *testing.B) {
	benchmarkCopyOpt(b, responsesStream(500), responsesOptions())
}

// ScrubError rewrites the data of a Responses error event (an "error"
// event, response.failed) and keeps its "event:" line; other events are
// not given to it.
func TestCopyResponses_ScrubError(t *testing.T) {
	in := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"up/m\"}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"message\":\"key sk-secret refused\",\"sequence_number\":1}\n\n" +
		"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"model\":\"up/m\",\"error\":{\"message\":\"sk-secret\"}}}\n\n"
	var calls int
	opt := sse.Options{Responses: true, Model: "client", UpstreamModel: "up/m", ScrubError: func(data []byte) []byte {
		calls++
		return bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("sk-secret"), []byte("[redacted]")), []byte("up/m"), []byte("client"))
	}}
	var dst bytes.Buffer
	res, err := sse.Copy(&dst, strings.NewReader(in), opt)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(strings.ReplaceAll(in, "sk-secret", "[redacted]"), "up/m", "client")
	if dst.String() != want || calls != 2 || !res.Done || !res.ErrorEvent || res.Events != 3 {
		t.Fatalf("%d calls, %+v:\n%s", calls, res, cmp.Diff(want, dst.String()))
	}
}
