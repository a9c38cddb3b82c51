package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBudgetsCLI runs `llmflow budgets` against a real gateway (serve,
// SQLite): set, increase, list, a refused request, delete; the master key
// from a file only, errors as the API's message.
func TestBudgetsCLI(t *testing.T) {
	e := startE2E(t)
	keyFile := filepath.Join(e.dir, "master.key")
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		args = append(args, "--url", e.base, "--admin-key-file", keyFile)
		code := Run(context.Background(), args, &out, &errb)
		return out.String(), errb.String(), code
	}
	out, errs, code := run("budgets", "set", "--kind", "team", "--name", "lab-nlp", "--period", "day", "--max-cost", "0", "--soft-limit", "0")
	if code != 0 || !strings.Contains(out, "lab-nlp") {
		t.Fatalf("set: exit %d\n%s%s", code, out, errs)
	}
	// a zero budget refuses
	resp := e2ePost(t, e, `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	if resp != 429 {
		t.Fatalf("request under a zero budget: %d", resp)
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	out, errs, code = run("budgets", "increase", "--kind", "team", "--name", "lab-nlp", "--amount", "1", "--expires", exp)
	if code != 0 || !strings.Contains(out, "  1  ") {
		t.Fatalf("increase: exit %d\n%s%s", code, out, errs)
	}
	if resp := e2ePost(t, e, `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); resp != 200 {
		t.Fatalf("after the increase: %d", resp)
	}
	out, errs, code = run("budgets", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "KIND") || strings.Join(strings.Fields(lines[len(lines)-1])[:6], " ") != "team lab-nlp * day admin 1" {
		t.Fatalf("list: exit %d\n%s%s", code, out, errs)
	}
	out, _, code = run("budgets", "list", "--json")
	if code != 0 || !strings.Contains(out, `"effective_limit":1`) {
		t.Fatalf("list --json: %s", out)
	}
	_, errs, code = run("budgets", "set", "--kind", "team", "--name", "nope", "--max-cost", "1")
	if code == 0 || !strings.Contains(errs, `404 Not Found: no team "nope" in the account tree`) {
		t.Fatalf("set on an unknown team: exit %d %s", code, errs)
	}
	out, errs, code = run("budgets", "delete", "--kind", "team", "--name", "lab-nlp")
	if code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: exit %d\n%s%s", code, out, errs)
	}
	// llmflow admin budgets: the same subcommands with admin's flags (a
	// token file, LLMFLOW_ADMIN_URL), which llmflow budgets reads too.
	t.Setenv("LLMFLOW_ADMIN_URL", e.base)
	var ob, eb2 bytes.Buffer
	code = Run(context.Background(), []string{"admin", "--token-file", keyFile, "budgets", "set", "--kind", "team", "--name", "lab-nlp", "--max-cost", "2"}, &ob, &eb2)
	if code != 0 || !strings.Contains(ob.String(), "lab-nlp") {
		t.Fatalf("admin budgets set: exit %d\n%s%s", code, ob.String(), eb2.String())
	}
	ob.Reset()
	code = Run(context.Background(), []string{"budgets", "list", "--admin-key-file", keyFile}, &ob, &eb2)
	lines = strings.Split(strings.TrimSpace(ob.String()), "\n")
	if code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[1])[:6], " ") != "team lab-nlp * month admin 3" { // 2 + the increase of 1 still running
		t.Fatalf("budgets list with LLMFLOW_ADMIN_URL: exit %d\n%s%s", code, ob.String(), eb2.String())
	}
	// A wrong key file: 401, and the secret is never echoed.
	bad := filepath.Join(t.TempDir(), "wrong.key")
	os.WriteFile(bad, []byte("not-the-master-key-0123456789abcdef0123\n"), 0o600)
	var o, eb bytes.Buffer
	code = Run(context.Background(), []string{"budgets", "list", "--url", e.base, "--admin-key-file", bad}, &o, &eb)
	if code == 0 || !strings.Contains(eb.String(), "401") || strings.Contains(eb.String(), "not-the-master") {
		t.Fatalf("wrong key: exit %d %s", code, eb.String())
	}
	// No key file and no configuration: told what to give.
	o.Reset()
	eb.Reset()
	code = Run(context.Background(), []string{"budgets", "list", "--url", e.base}, &o, &eb)
	if code == 0 || !strings.Contains(eb.String(), "--admin-key-file") {
		t.Fatalf("no key: exit %d %s", code, eb.String())
	}
}

func e2ePost(t *testing.T, e *e2e, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
