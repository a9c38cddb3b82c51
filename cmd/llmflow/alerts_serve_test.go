package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoftLimitAlertArrives: a budget crossing its soft limit in a real
// serve (SQLite, vllmsim) reaches the webhook once, however many requests
// follow in the period; the alert names the budget and its period.
func TestSoftLimitAlertArrives(t *testing.T) {
	var got atomic.Int32
	var body atomic.Value
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") == "Bearer hook-token" {
			got.Add(1)
			body.Store(string(b))
		}
	}))
	defer hook.Close()
	e := startE2EWith(t, `
alerts {
  webhook_url        = "`+hook.URL+`/hook"
  webhook_token_file = "hook.token"
}
`, func(dir string) { os.WriteFile(filepath.Join(dir, "hook.token"), []byte("hook-token\n"), 0o600) })
	master, _ := os.ReadFile(filepath.Join(e.dir, "master.key"))
	req, _ := http.NewRequest(http.MethodPut, e.base+"/admin/budgets",
		strings.NewReader(`{"kind":"team","name":"lab-nlp","period":"day","max_cost":10,"soft_limit":1e-9}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(master)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT /admin/budgets: %d", resp.StatusCode)
	}
	for i := range 5 {
		if code := e2ePost(t, e, `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	for i := 0; got.Load() == 0 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a duplicate to arrive
	if n := got.Load(); n != 1 {
		t.Fatalf("webhook got %d alerts, want 1", n)
	}
	b, _ := body.Load().(string)
	for _, want := range []string{`"budget_id":"team/lab-nlp/"`, `"scope_kind":"team"`, `"scope_name":"lab-nlp"`, `"period":"day"`} {
		if !strings.Contains(b, want) {
			t.Errorf("alert %s lacks %s", b, want)
		}
	}
}
