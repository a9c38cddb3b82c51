package sse_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sse"
)

// FuzzCopy checks, for any input, that Copy does not panic, that with
// KeepUsage it forwards the input unchanged up to and including the [DONE]
// event (as the reference parser finds it), and that the output and Result
// do not depend on how the input is split into reads. The seed corpus is
// in testdata/fuzz/FuzzCopy (rewritten by go test -update from the
// transcripts).
func FuzzCopy(f *testing.F) {
	f.Add([]byte(chunk("a") + usageChunk + done))
	f.Add([]byte("data: [DONE]\r\n\r"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\r\r"))
	f.Add([]byte("data: {\"model\":\"up/m\",\"choices\":[{\"delta\":{}}]}\r\n\r\ndata:{\"model\" : \"x\"}\n\n" + done))
	f.Fuzz(func(t *testing.T, in []byte) {
		opt := func(keep bool) sse.Options { return sse.Options{KeepUsage: keep, MaxEventBytes: len(in) + 1} }
		run := func(src io.Reader, keep bool) (string, sse.Result) {
			var dst bytes.Buffer
			res, err := sse.Copy(&dst, src, opt(keep))
			if err != nil {
				t.Fatalf("Copy: %v", err)
			}
			return dst.String(), res
		}

		// Reference: everything up to and including the first [DONE].
		evs, tail := refParse(string(in))
		var want strings.Builder
		wantDone := false
		for _, e := range evs {
			want.WriteString(e.Raw)
			if e.HasData && strings.HasPrefix(e.Data, "[DONE]") {
				wantDone = true
				break
			}
		}
		if !wantDone {
			want.WriteString(tail)
		}

		for _, keep := range []bool{true, false} {
			whole, res := run(bytes.NewReader(in), keep)
			if keep {
				if whole != want.String() {
					t.Fatalf("KeepUsage output is not the input up to [DONE]:\n%s", cmp.Diff(want.String(), whole))
				}
				if res.Done != wantDone {
					t.Fatalf("Done = %v, reference %v", res.Done, wantDone)
				}
			} else if !isSubsequence(whole, want.String()) {
				t.Fatalf("output with usage dropped is not made of input events:\n%q\n%q", whole, want.String())
			}
			for how, src := range map[string]io.Reader{
				"onebyte": iotest.OneByteReader(bytes.NewReader(in)),
				"odd":     pairs(in, true),
			} {
				got, gotRes := run(src, keep)
				if got != whole {
					t.Fatalf("keep=%v %s: output differs from whole read:\n%s", keep, how, cmp.Diff(whole, got))
				}
				if diff := cmp.Diff(res, gotRes); diff != "" {
					t.Fatalf("keep=%v %s: Result differs (-whole +got):\n%s", keep, how, diff)
				}
			}
		}

		// Renaming the model changes no Result but Bytes, and is idempotent.
		ren := sse.Options{KeepUsage: true, MaxEventBytes: len(in) + 64, Model: "client", UpstreamModel: "up/m"}
		var dst bytes.Buffer
		renRes, err := sse.Copy(&dst, bytes.NewReader(in), ren)
		if err != nil {
			t.Fatalf("Copy with Model: %v", err)
		}
		_, keepRes := run(bytes.NewReader(in), true)
		renRes.Bytes, keepRes.Bytes = 0, 0
		if diff := cmp.Diff(keepRes, renRes); diff != "" {
			t.Fatalf("Model changed the Result (-without +with):\n%s", diff)
		}
		var again bytes.Buffer
		if _, err := sse.Copy(&again, bytes.NewReader(dst.Bytes()), ren); err != nil {
			t.Fatalf("Copy of renamed output: %v", err)
		}
		if again.String() != dst.String() {
			t.Fatalf("renaming is not idempotent:\n%s", cmp.Diff(dst.String(), again.String()))
		}
	})
}

// isSubsequence reports whether s can be obtained from t by deleting bytes.
func isSubsequence(s, t string) bool {
	for i := 0; i < len(s); i++ {
		j := strings.IndexByte(t, s[i])
		if j < 0 {
			return false
		}
		t = t[j+1:]
	}
	return true
}
