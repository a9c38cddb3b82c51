package gateway

import (
	"fmt"
	"testing"
	"time"
)

// TestTPMHoldsOutput: a key's tokens-per-minute window holds each
// request's prompt and output bound at admission (settled to the real
// count at the end), so a parallel burst of long answers never uses more
// tokens in the minute than the limit; when it counted the prompt's
// estimate alone, 40 requests of 200 tokens all passed a limit of 2,000.
// In memory and with the key's window in Redis.
func TestTPMHoldsOutput(t *testing.T) {
	const tpm = 2000
	for _, redis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) {
			_, hs := simUpstream(t, time.Millisecond)
			var mods []func(*Options)
			if redis {
				mods = append(mods, sharedRedis(t))
			}
			e, _ := budgetEnv(t, []string{hs.URL}, "", mods...)
			_, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "tpm", TPM: tpm}, Principal{})
			if err != nil {
				t.Fatal(err)
			}
			run := burst(t, e, secret, "/v1/chat/completions",
				`{"model":"m","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":200}`, 40)
			// the sim counts 4 prompt tokens for the 16 bytes of content
			used := run.completion + 4*int64(run.served)
			t.Logf("served %d, refused %d: %d tokens used of %d per minute", run.served, run.refused, used, tpm)
			if run.other > 0 || run.served == 0 || run.refused == 0 {
				t.Fatalf("served %d refused %d, %d others (%s)", run.served, run.refused, run.other, run.firstOther)
			}
			if used > tpm {
				t.Fatalf("%d tokens used in the minute, over the key's %d", used, tpm)
			}
		})
	}
}
