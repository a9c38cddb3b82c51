package sse_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sse"
)

// chunk builds a vLLM-style chat chunk with the given delta content.
func chunk(content string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` +
		strconvQuote(content) + `},"logprobs":null,"finish_reason":null}]}` + "\n\n"
}

func strconvQuote(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

const (
	usageChunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}` + "\n\n"
	done       = "data: [DONE]\n\n"
)

func TestCopy_Cases(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		keep     bool
		wantOut  string // "" means the same as in
		wantRes  sse.Result
		wantDrop bool // wantOut is in without usageChunk
	}{
		{
			name:     "UsageDropped",
			in:       chunk("a") + usageChunk + done,
			wantDrop: true,
			wantRes:  sse.Result{Usage: sse.Usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 8}, HasUsage: true, Done: true, Deltas: 1, Events: 2},
		},
		{
			name:    "UsageKept",
			in:      chunk("a") + usageChunk + done,
			keep:    true,
			wantRes: sse.Result{Usage: sse.Usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 8}, HasUsage: true, Done: true, Deltas: 1, Events: 3},
		},
		{
			name: "UsageLastWins",
			in: `data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\n" +
				`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{"content":"y"}}],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":2}}}` + "\n\n",
			keep:    true,
			wantRes: sse.Result{Usage: sse.Usage{PromptTokens: 5, CompletionTokens: 4, TotalTokens: 9, CachedTokens: 2}, HasUsage: true, Deltas: 2, Events: 3},
		},
		{
			name: "UsageNullIsNotUsage",
			in: `data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}` + "\n\n" +
				`data: {"choices":[],"usage":null}` + "\n\n" + // odd, but not a usage chunk: keep it
				`data: {"choices": [], "usage": null}` + "\n\n" +
				done,
			wantRes: sse.Result{Done: true, Deltas: 1, Events: 4},
		},
		{
			name: "UsageWordInContent",
			in: chunk("usage") + chunk(`"usage"`) + chunk(`{"usage":{"prompt_tokens":9}}`) +
				`data: {"choices":[{"index":0,"delta":{"content":"usage","tool_calls":[{"function":{"arguments":"{\"usage\":{\"prompt_tokens\":1}}"}}]}}],"x":{"usage":{"prompt_tokens":3}}}` + "\n\n" +
				done,
			wantRes: sse.Result{Done: true, Deltas: 4, Events: 5},
		},
		{
			name: "ErrorTopLevelOnly",
			in: chunk("error") + chunk(`{"error":{"message":"x"}}`) +
				`data: {"choices":[{"index":0,"delta":{"content":"x"}}],"meta":{"error":{"message":"nested"}}}` + "\n\n" +
				`data: {"error":null,"choices":[{"index":0,"delta":{}}]}` + "\n\n" +
				done,
			wantRes: sse.Result{Done: true, Deltas: 4, Events: 5},
		},
		{
			name:    "ErrorEvent",
			in:      chunk("a") + `data: {"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}` + "\n\n" + done,
			wantRes: sse.Result{Done: true, ErrorEvent: true, Deltas: 1, Events: 3},
		},
		{
			name:    "DoneStopsReading",
			in:      chunk("a") + done + chunk("after"),
			wantOut: chunk("a") + done,
			wantRes: sse.Result{Done: true, Deltas: 1, Events: 2},
		},
		{
			name:    "EOFWithoutDone",
			in:      chunk("a") + chunk("b"),
			wantRes: sse.Result{Deltas: 2, Events: 2},
		},
		{
			name:    "PartialLastEvent",
			in:      chunk("a") + "data: [DONE]\n",
			wantRes: sse.Result{Deltas: 1, Events: 1},
		},
		{
			name:    "CommentsAndFields",
			in:      ": ping\n\nevent: message\nid: 7\nretry: 10\n" + chunk("a") + ":\n\n" + done,
			wantRes: sse.Result{Done: true, Deltas: 1, Events: 2},
		},
		{
			name:    "NotJSON",
			in:      "data: hello\n\ndata: {not json \"usage\" \"error\"\n\n" + done,
			wantRes: sse.Result{Done: true, Events: 3},
		},
		{
			name:     "UsageChunkWithSpaces",
			in:       "data: { \"choices\" : [ ] , \"usage\" : { \"prompt_tokens\" : 1 , \"completion_tokens\" : 2 , \"total_tokens\" : 3 } }\n\n" + done,
			wantDrop: true,
			wantOut:  done,
			wantRes:  sse.Result{Usage: sse.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, HasUsage: true, Done: true, Events: 1},
		},
		{
			name:    "UsageWithoutChoicesIsForwarded",
			in:      `data: {"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\n" + done,
			wantRes: sse.Result{Usage: sse.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, HasUsage: true, Done: true, Events: 2},
		},
		{
			name:    "DonePrefix",
			in:      "data: [DONE] \n\n" + chunk("after"),
			wantOut: "data: [DONE] \n\n",
			wantRes: sse.Result{Done: true, Events: 1},
		},
		{
			name:    "Empty",
			in:      "",
			wantRes: sse.Result{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.in
			switch {
			case tt.wantOut != "":
				want = tt.wantOut
			case tt.wantDrop:
				want = strings.Replace(tt.in, usageChunk, "", 1)
			}
			tt.wantRes.Bytes = int64(len(want))
			for how, r := range readers([]byte(tt.in)) {
				got, res := MustCopy(t, r(), tt.keep)
				if got != want {
					t.Errorf("%s: output mismatch (-want +got):\n%s", how, cmp.Diff(want, got))
				}
				if diff := cmp.Diff(tt.wantRes, res); diff != "" {
					t.Errorf("%s: Result mismatch (-want +got):\n%s", how, diff)
				}
			}
		})
	}
}

// TestCopy_Streams proves that Copy forwards and flushes each event before
// the next one exists: the upstream writes the second event only after the
// test saw the first one flushed to the client.
func TestCopy_Streams(t *testing.T) {
	pr, pw := io.Pipe()
	flushed := make(chan string)
	var dst bytes.Buffer
	type result struct {
		res sse.Result
		err error
	}
	doneCh := make(chan result, 1)
	go func() {
		res, err := sse.Copy(&dst, pr, sse.Options{Flush: func() error {
			flushed <- dst.String()
			dst.Reset()
			return nil
		}})
		doneCh <- result{res, err}
	}()

	events := []string{chunk("first"), ": ping\n\n", chunk("second"), usageChunk, done}
	for i, ev := range events {
		if _, err := io.WriteString(pw, ev); err != nil {
			t.Fatal(err)
		}
		if ev == usageChunk {
			continue // dropped: nothing reaches the client
		}
		select {
		case got := <-flushed:
			if got != ev {
				t.Fatalf("event %d: client got %q, want %q", i, got, ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d was not flushed before the next one was written", i)
		}
	}
	pw.Close()
	r := <-doneCh
	if r.err != nil || !r.res.Done || r.res.Events != 3 || !r.res.HasUsage {
		t.Fatalf("Copy = %+v, %v", r.res, r.err)
	}
}

// Events that arrive together (one read of the engine's answer) go to the
// client in one flush; events that arrive apart, one flush each.
func TestCopy_FlushesWhatArrivedTogether(t *testing.T) {
	events := []string{chunk("a"), ": ping\n\n", chunk("b"), usageChunk, done}
	for _, tt := range []struct {
		name    string
		reads   []string
		flushes int
	}{
		{"one read", []string{strings.Join(events, "")}, 1},
		{"a read each", events, 4}, // the usage chunk is dropped: nothing to flush after it
		{"two reads", []string{events[0] + events[1], events[2] + events[3] + events[4]}, 2},
		{"an event split", []string{events[0] + events[1][:3], events[1][3:] + events[2], events[3] + events[4]}, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var dst recorder
			res, err := sse.Copy(&dst, dst.source(readsOf(tt.reads...)), sse.Options{Flush: dst.Flush})
			if err != nil || !res.Done {
				t.Fatalf("Copy = %+v, %v", res, err)
			}
			dst.check(t)
			if dst.flushes != tt.flushes || dst.writes != 4 {
				t.Fatalf("%d writes in %d flushes, want 4 in %d", dst.writes, dst.flushes, tt.flushes)
			}
		})
	}
}

// With LeaveEnd, the stream's end and what arrived with it are written
// but left unflushed for the caller, whose own last flush (an HTTP
// handler's return) carries them: every other write is still flushed
// before Copy waits, and a stream that ends without [DONE] is flushed.
func TestCopy_LeaveEnd(t *testing.T) {
	events := []string{chunk("a"), ": ping\n\n", chunk("b"), usageChunk, done}
	for _, tt := range []struct {
		name    string
		reads   []string
		flushes int
		left    bool // written and not flushed when Copy returned
	}{
		{"one read", []string{strings.Join(events, "")}, 0, true},
		{"a read each", events, 3, true},
		{"two reads", []string{events[0] + events[1], events[2] + events[3] + events[4]}, 1, true},
		{"done alone", []string{events[0] + events[1] + events[2] + events[3], events[4]}, 1, true},
		{"no done", []string{events[0], events[1] + events[2]}, 2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var dst recorder
			res, err := sse.Copy(&dst, dst.source(readsOf(tt.reads...)), sse.Options{Flush: dst.Flush, LeaveEnd: true})
			if err != nil || res.Done != tt.left {
				t.Fatalf("Copy = %+v, %v", res, err)
			}
			if dst.heldAtRead > 0 || dst.flushes != tt.flushes || dst.unflushed != tt.left {
				t.Fatalf("%d flushes, %d reads of the source with a write not flushed, unflushed at the end %v; want %d flushes, none, %v",
					dst.flushes, dst.heldAtRead, dst.unflushed, tt.flushes, tt.left)
			}
			if want := strings.Join(slices.DeleteFunc(slices.Clone(events), func(e string) bool { return e == usageChunk }), ""); res.Done && dst.String() != want {
				t.Fatalf("client got %q, want %q", dst.String(), want)
			}
		})
	}
}

// A CR that ends an event must not wait for a possible LF: in a CR-only
// stream the event is flushed before the next byte exists.
func TestCopy_StreamsCROnly(t *testing.T) {
	pr, pw := io.Pipe()
	flushed := make(chan string, 1)
	var dst bytes.Buffer
	go func() {
		sse.Copy(&dst, pr, sse.Options{Flush: func() error {
			flushed <- dst.String()
			dst.Reset()
			return nil
		}})
	}()
	defer pw.Close()
	for _, ev := range []string{"data: 1\r\r", "data: 2\r\r"} {
		io.WriteString(pw, ev)
		select {
		case got := <-flushed:
			if got != ev {
				t.Fatalf("client got %q, want %q", got, ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q was not flushed", ev)
		}
	}
}

type failWriter struct {
	n   int // successful writes left
	err error
}

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, w.err
	}
	w.n--
	return len(p), nil
}

func TestCopy_WriteError(t *testing.T) {
	errGone := errors.New("client gone")
	in := chunk("a") + chunk("b") + done

	t.Run("Write", func(t *testing.T) {
		res, err := sse.Copy(&failWriter{n: 1, err: errGone}, strings.NewReader(in), sse.Options{})
		var we *sse.WriteError
		if !errors.As(err, &we) || !errors.Is(err, errGone) {
			t.Fatalf("err = %v, want a *WriteError wrapping %v", err, errGone)
		}
		if res.Bytes != int64(len(chunk("a"))) || res.Done {
			t.Errorf("Result = %+v", res)
		}
		if !strings.Contains(err.Error(), "client gone") {
			t.Errorf("Error() = %q", err)
		}
	})
	t.Run("Flush", func(t *testing.T) {
		_, err := sse.Copy(io.Discard, strings.NewReader(in), sse.Options{Flush: func() error { return errGone }})
		var we *sse.WriteError
		if !errors.As(err, &we) || we.Err != errGone {
			t.Fatalf("err = %v, want a *WriteError wrapping %v", err, errGone)
		}
	})
	t.Run("FlushStopsReading", func(t *testing.T) {
		// a flush that fails before Copy waits for the engine: nothing more
		// is read (the engine's request is cancelled by the caller)
		reads := 0
		src := readFunc(func(p []byte) (int, error) {
			reads++
			if reads > 1 {
				t.Fatal("read the source after a failed flush")
			}
			return copy(p, chunk("a")), nil
		})
		res, err := sse.Copy(io.Discard, src, sse.Options{Flush: func() error { return errGone }})
		var we *sse.WriteError
		if !errors.As(err, &we) || we.Err != errGone || res.Events != 1 {
			t.Fatalf("Copy = %+v, %v; want one event, then a *WriteError wrapping %v", res, err, errGone)
		}
	})
	t.Run("ShortWrite", func(t *testing.T) {
		_, err := sse.Copy(shortWriter{}, strings.NewReader(in), sse.Options{})
		if !errors.Is(err, io.ErrShortWrite) {
			t.Fatalf("err = %v, want io.ErrShortWrite", err)
		}
	})
	t.Run("ReadErrorIsNotWriteError", func(t *testing.T) {
		errUp := errors.New("upstream reset")
		src := io.MultiReader(strings.NewReader(chunk("a")+"data: {\"cho"), iotest.ErrReader(errUp))
		var dst bytes.Buffer
		res, err := sse.Copy(&dst, src, sse.Options{})
		var we *sse.WriteError
		if !errors.Is(err, errUp) || errors.As(err, &we) {
			t.Fatalf("err = %v, want %v not wrapped in WriteError", err, errUp)
		}
		if dst.String() != chunk("a") || res.Events != 1 {
			t.Errorf("forwarded %q, Result %+v; want only the complete event", dst.String(), res)
		}
	})
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }

func TestCopy_ErrEventTooLarge(t *testing.T) {
	small := chunk("a")
	big := chunk(strings.Repeat("x", 300))
	in := small + big + done
	for _, max := range []int{len(big) - 1, len(big) - 2, 10} {
		var dst bytes.Buffer
		res, err := sse.Copy(&dst, strings.NewReader(in), sse.Options{MaxEventBytes: max})
		if !errors.Is(err, sse.ErrEventTooLarge) {
			t.Fatalf("max %d: err = %v, want ErrEventTooLarge", max, err)
		}
		want := small
		if max < len(small) {
			want = ""
		}
		if dst.String() != want || res.Done {
			t.Errorf("max %d: forwarded %q (Result %+v), want %q", max, dst.String(), res, want)
		}
	}
	// At the limit exactly, the event passes.
	got, res := MustCopyOpt(t, strings.NewReader(in), sse.Options{MaxEventBytes: len(big)})
	if got != in || !res.Done {
		t.Errorf("at the limit: got %q, %+v", got, res)
	}
	// The default limit is 1 MiB.
	huge := "data: " + strings.Repeat("x", sse.DefaultMaxEventBytes) + "\n\n"
	if _, err := sse.Copy(io.Discard, strings.NewReader(huge), sse.Options{}); !errors.Is(err, sse.ErrEventTooLarge) {
		t.Errorf("1 MiB event: err = %v, want ErrEventTooLarge", err)
	}
}

func MustCopyOpt(tb testing.TB, src io.Reader, opt sse.Options) (string, sse.Result) {
	tb.Helper()
	var dst bytes.Buffer
	res, err := sse.Copy(&dst, src, opt)
	if err != nil {
		tb.Fatalf("Copy: %v", err)
	}
	return dst.String(), res
}

// TestCopy_Model: with Model set, every transcript comes out as with
// KeepUsage, the top-level "model" of each data event renamed; nested
// "model" members and other text stay.
func TestCopy_Model(t *testing.T) {
	for _, file := range transcripts(t) {
		in := readFile(t, file)
		keep, _ := MustCopy(t, bytes.NewReader(in), true)
		var up string
		if m := regexp.MustCompile(`"model":"[^"]*"`).Find(in); m != nil {
			up = string(m[len(`"model":"`) : len(m)-1])
		}
		for _, o := range []sse.Options{
			{KeepUsage: true, Model: "my/llama \"8B\"", UpstreamModel: up},
			{KeepUsage: true, Model: up, UpstreamModel: up}, // same name: unchanged
		} {
			var dst bytes.Buffer
			if _, err := sse.Copy(&dst, bytes.NewReader(in), o); err != nil {
				t.Fatal(err)
			}
			want := keep
			if o.Model != o.UpstreamModel {
				q, _ := json.Marshal(o.Model)
				want = strings.ReplaceAll(keep, `"model":"`+up+`"`, `"model":`+string(q))
			}
			if got := dst.String(); got != want {
				t.Errorf("%s Model=%q:\n%s", file, o.Model, cmp.Diff(want, got))
			}
		}
	}
	cases := []struct{ in, want string }{
		{"data: {\"model\":\"up\",\"choices\":[{\"model\":\"up\"}]}\r\n\r\n", "data: {\"model\":\"c\",\"choices\":[{\"model\":\"up\"}]}\r\n\r\n"},
		{"id: 1\ndata:{ \"model\" : \"other\" }\n\n", "id: 1\ndata:{ \"model\" : \"c\" }\n\n"},
		{"data: {\"model\":null}\n\n", "data: {\"model\":null}\n\n"},
		{"data: {\"content\":\"\\\"model\\\":\\\"up\\\"\"}\n\n", "data: {\"content\":\"\\\"model\\\":\\\"up\\\"\"}\n\n"},
		{"data: {\"model\":\ndata: \"up\"}\n\n", "data: {\"model\":\ndata: \"up\"}\n\n"}, // two data lines: as it is
	}
	for _, tc := range cases {
		var dst bytes.Buffer
		if _, err := sse.Copy(&dst, strings.NewReader(tc.in), sse.Options{Model: "c", UpstreamModel: "up"}); err != nil {
			t.Fatal(err)
		}
		if dst.String() != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.in, dst.String(), tc.want)
		}
	}
}
