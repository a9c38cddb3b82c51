package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/engine"
)

// topLevel decodes a JSON object with a token decoder that sees every key,
// duplicates included, in order.
func topLevel(t testing.TB, b []byte) (keys []string, vals map[string]any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	vals = map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v in %s", err, b)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v in %s", err, b)
		}
		keys = append(keys, tok.(string))
		vals[tok.(string)] = v
	}
	return keys, vals
}

var rewriteSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","priority":-100,"messages":[]}`,
	`{"model":"m","\u0070riority":-100,"\u006dodel":"other"}`,
	`{"model":"m","priority":1,"priority":2,"extra_body":{"priority":-1}}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`,
	`{"model":"m","stream":true,"stream_options":{}}`,
	`{"model":"m","cache_salt":"x","request_id":"r","kv_transfer_params":{},"ec_transfer_params":null,"vllm_xargs":{},"session_id":"s","id_slot":3}`,
	`{"model":"m","n\u0000ame":"\u003cscript\u003e","emoji":"\ud83d\ude00","x":1e400}`,
	` { "model" : "m" , "stream" : false , "temperature" : 0.5 } `,
	`{"model":"m","input":["a","b"]}`,
}

func TestRewrite(t *testing.T) {
	for _, body := range rewriteSeeds {
		t.Run("", func(t *testing.T) {
			checkRewrite(t, []byte(body), engine.ChatCompletions, true)
		})
	}
}

func TestRewriteRefuses(t *testing.T) {
	for _, body := range []string{
		``, `null`, `[]`, `"x"`, `{"model":"m"`, `{"model":"m"}x`, `{"model":"m",}`,
		`{"model":""}`, `{"model":null}`, `{"model":1}`, `{"messages":[]}`,
		`{"model":"m","stream":1}`, `{"model":"m","stream":"true"}`,
		`{"model":"m","stream_options":{"include_usage":true}}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":"yes"}}`,
		"{\"model\":\"m\",\"x\":\"\xff\"}",
	} {
		if _, err := parseRequest([]byte(body), engine.ChatCompletions); err == nil {
			t.Errorf("%q accepted", body)
		}
	}
	if _, err := parseRequest([]byte(`{"model":"m","stream":true}`), engine.Embeddings); err == nil {
		t.Error("streamed embeddings accepted")
	}
}

// Many duplicate keys stay linear and last wins.
func TestRewriteManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m"`)
	for i := range 5000 {
		b.WriteString(`,"k`)
		b.WriteString(strings.Repeat("x", i%100))
		b.WriteString(`":`)
		b.WriteString(strings.Repeat("1", 1+i%3))
	}
	b.WriteString(`,"priority":5}`)
	checkRewrite(t, []byte(b.String()), engine.ChatCompletions, true)
}

// checkRewrite checks the upstream body made from a client body: valid
// JSON, every key once, no stripped field, the gateway's model, salt and
// priority, and every other member as encoding/json decodes it (last of
// duplicates).
func checkRewrite(t testing.TB, body []byte, ep engine.Endpoint, mustParse bool) {
	t.Helper()
	rq, err := parseRequest(body, ep)
	if err != nil {
		if mustParse {
			t.Fatalf("parse %s: %v", body, err)
		}
		return
	}
	out := rq.encode(upstreamBody{engine: &vllm, model: "up/model", cacheSalt: "salt", priority: 7, withPrio: true})
	if !json.Valid(out) {
		t.Fatalf("invalid upstream body %q from %q", out, body)
	}
	keys, vals := topLevel(t, out)
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("key %q twice in %s", k, out)
		}
		seen[k] = true
		if k != "cache_salt" && k != "priority" && slices.Contains(engine.Stripped, k) {
			t.Fatalf("stripped field %q in %s", k, out)
		}
	}
	if vals["model"] != "up/model" || vals["cache_salt"] != "salt" || vals["priority"] != json.Number("7") {
		t.Fatalf("gateway fields wrong in %s", out)
	}
	var client map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&client); err != nil {
		t.Fatalf("accepted a body encoding/json refuses: %v", err)
	}
	for k, v := range client {
		switch {
		case k == "model" || k == "stream_options" || slices.Contains(engine.Stripped, k):
		case !reflect.DeepEqual(vals[k], v):
			t.Fatalf("member %q: upstream %v, client %v", k, vals[k], v)
		}
	}
	if rq.stream {
		so, _ := vals["stream_options"].(map[string]any)
		if so["include_usage"] != true {
			t.Fatalf("stream without include_usage: %s", out)
		}
	} else if _, ok := vals["stream_options"]; ok {
		t.Fatalf("stream_options on a non-stream: %s", out)
	}
}

func FuzzRewrite(f *testing.F) {
	for _, s := range rewriteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkRewrite(t, body, engine.ChatCompletions, false)
	})
}

// vllm is the descriptor of a vLLM pool with the default priority_via.
var vllm, _ = engine.For("priority", "both")
