package sse

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// With DropChunkUsage, a stream with vLLM's continuous usage reaches the
// client byte for byte as the engine sends it without: the usage member of
// each content chunk is cut out, the final usage chunk is kept or dropped
// as KeepUsage says, and the running count is reported.
func TestDropChunkUsage(t *testing.T) {
	chunk := func(content string, usage string) string {
		u := ""
		if usage != "" {
			u = `,"usage":` + usage
		}
		return `data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"up","choices":[{"index":0,"delta":{"content":"` + content + `"},"logprobs":null,"finish_reason":null}]` + u + "}\n\n"
	}
	in := chunk("", `{"prompt_tokens":5,"total_tokens":5,"completion_tokens":0}`) +
		chunk("a", `{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}`) +
		"data: {\"usage\": {\"prompt_tokens\":5,\"completion_tokens\":2} , \"choices\":[{\"index\":0,\"text\":\"b\"}]}\r\n\r\n" +
		`data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2}}` + "\n\n" +
		"data: [DONE]\n\n"
	want := chunk("", "") + chunk("a", "") +
		"data: {\"choices\":[{\"index\":0,\"text\":\"b\"}]}\r\n\r\n" +
		"data: [DONE]\n\n"
	var out bytes.Buffer
	res, err := Copy(&out, strings.NewReader(in), Options{DropChunkUsage: true})
	if err != nil || !res.Done {
		t.Fatalf("Copy: %v, %+v", err, res)
	}
	if out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
	if !res.HasUsage || res.Usage.PromptTokens != 5 || res.Usage.CompletionTokens != 2 {
		t.Errorf("usage %+v", res.Usage)
	}
	// with a model rename too
	out.Reset()
	if _, err := Copy(&out, strings.NewReader(in), Options{DropChunkUsage: true, Model: "mine", UpstreamModel: "up"}); err != nil {
		t.Fatal(err)
	}
	if w := strings.ReplaceAll(want, `"model":"up"`, `"model":"mine"`); out.String() != w {
		t.Errorf("renamed: got\n%q\nwant\n%q", out.String(), w)
	}
}

// FuzzCutMember: cutting a member leaves valid JSON with every other
// member as it was.
func FuzzCutMember(f *testing.F) {
	f.Add([]byte(`{"a":1,"usage":{"x":2},"b":[3]}`))
	f.Add([]byte(`{"usage":null}`))
	f.Add([]byte(`{ "usage" : {} , "a" : "usage" }`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before map[string]json.RawMessage
		if json.Unmarshal(data, &before) != nil || bytes.ContainsAny(data, "\r\n") {
			return
		}
		raw := append(append([]byte("data: "), data...), '\n', '\n')
		got, _ := cutMember(nil, raw, data, "usage")
		if bytes.Equal(got, raw) {
			return // not cut: absent, or not spelled plainly
		}
		ev := bytes.TrimSuffix(bytes.TrimPrefix(got, []byte("data: ")), []byte("\n\n"))
		var after map[string]json.RawMessage
		if err := json.Unmarshal(ev, &after); err != nil {
			t.Fatalf("cut %q into %q: %v", data, ev, err)
		}
		delete(before, "usage")
		if _, has := after["usage"]; has && bytes.Count(data, []byte(`"usage"`)) < 2 {
			t.Fatalf("usage left in %q", ev)
		}
		for k, v := range before {
			if !bytes.Equal(bytes.TrimSpace(after[k]), bytes.TrimSpace(v)) && bytes.Count(data, []byte(`"`+k+`"`)) < 2 {
				t.Fatalf("member %q: %q, was %q", k, after[k], v)
			}
		}
	})
}
