package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// TestAdminCLIUpstreamsAliases administers runtime routing as an operator
// would: a second simulated vLLM is added to sim-llama with `llmflow admin
// upstreams add`, shows up healthy in the -P listing, gets traffic, and
// stops getting it once removed; an alias is set, used (the answer names
// the alias), switched and removed; the configured upstream cannot be
// removed.
func TestAdminCLIUpstreamsAliases(t *testing.T) {
	e := startE2E(t)
	sim2 := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: time.Millisecond})
	srv2 := httptest.NewServer(sim2)
	t.Cleanup(func() { srv2.Close(); sim2.Close() })
	master := filepath.Join(e.dir, "master.key")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"admin", "--url", e.base, "--token-file", master}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errb, code := run(args...)
		if code != 0 {
			t.Fatalf("llmflow admin %s: exit %d: %s", strings.Join(args, " "), code, errb)
		}
		return out
	}
	chat := func(model string, n int) {
		t.Helper()
		for range n {
			req, _ := http.NewRequest("POST", e.base+"/v1/chat/completions",
				strings.NewReader(`{"model":"`+model+`","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+e.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Model string }
			json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if resp.StatusCode != 200 || got.Model != model {
				t.Fatalf("chat %s: %d, answer names %q", model, resp.StatusCode, got.Model)
			}
		}
	}

	// an engine of ours, with the model's key: said explicitly
	if got := ok("upstreams", "add", "sim-llama", "sim1", srv2.URL, "--inherit-key"); got != "upstream sim1 of model sim-llama added\n" {
		t.Errorf("add: %q", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(ok("upstreams", "list", "sim-llama", "-P", "-n"), "sim-llama|sim1|admin|yes|yes|") {
		if time.Now().After(deadline) {
			t.Fatalf("sim1 not healthy: %s", ok("upstreams", "list", "-P"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	list := ok("upstreams", "list", "-P")
	if !strings.HasPrefix(list, "Model|Upstream|Source|Served|Healthy|InFlight|Updated|By|BaseURL|Reason\nsim-llama|sim0|config|yes|yes|0|||http://") ||
		!strings.Contains(list, "|master|"+srv2.URL+"|\n") {
		t.Errorf("list:\n%s", list)
	}
	chat("sim-llama", 12)
	if sim2.Stats().Served == 0 {
		t.Fatal("the runtime upstream got no traffic")
	}
	if _, errb, code := run("upstreams", "remove", "sim-llama", "sim0"); code != 1 || !strings.Contains(errb, "409") || !strings.Contains(errb, "configuration") {
		t.Errorf("remove a configured upstream: exit %d %s", code, errb)
	}
	ok("upstreams", "remove", "sim-llama", "sim1")
	served := sim2.Stats().Served
	chat("sim-llama", 6)
	if sim2.Stats().Served != served {
		t.Errorf("a removed upstream still gets traffic")
	}

	ok("aliases", "set", "llama/fast", "sim-llama")
	if got := ok("aliases", "list", "-P", "-n"); !strings.HasPrefix(got, "llama/fast|sim-llama|yes|") || !strings.HasSuffix(got, "|master|\n") {
		t.Errorf("aliases list: %q", got)
	}
	chat("llama/fast", 2)
	if _, errb, code := run("aliases", "set", "sim-llama", "sim-llama"); code != 1 || !strings.Contains(errb, "409") {
		t.Errorf("alias over a configured model: exit %d %s", code, errb)
	}
	ok("aliases", "remove", "llama/fast")
	if got := ok("aliases", "list", "-P", "-n"); got != "" {
		t.Errorf("after remove: %q", got)
	}
}
