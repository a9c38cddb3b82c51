package console_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/server"
)

// TestSessionSurvivesReload: a console session (signed in with the
// master key) still works after a configuration reload swapped the
// gateway and the console under it; signing out then ends it.
func TestSessionSurvivesReload(t *testing.T) {
	addr := freeAddr(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "master.key"), []byte(masterKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := func(teams string) string {
		return `
master_key_file = "master.key"
org "etabA" {
  share = 1
  team "lab-nlp" {}` + teams + `
}
pool "p" { capacity = 4 }
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
store { path = "llmflow.db" }
`
	}
	file := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(file, []byte(src("")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reload, ready, done := make(chan struct{}, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, server.Options{Listen: addr, Log: slog.New(slog.DiscardHandler), Reload: reload,
			Ready: func(server.Started) { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	base := "http://" + addr

	req, _ := http.NewRequest("POST", base+"/console/login/token", strings.NewReader(`{"token":"`+masterKey+`"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sess struct{ CSRF string }
	json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-llmflow-session" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if resp.StatusCode != 200 || cookie == "" || sess.CSRF == "" {
		t.Fatalf("sign in: %d, cookie %q", resp.StatusCode, cookie)
	}

	// reload with a new team; wait until it is served
	if err := os.WriteFile(file, []byte(src("\n  team \"lab-new\" {}")), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(must(t, 200, "GET", base+"/admin/teams", masterKey, ""), "lab-new") {
		if time.Now().After(deadline) {
			t.Fatal("the reloaded configuration is not served after 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := call(t, "GET", base+"/admin/whoami", "", "", "Cookie", cookie); code != 200 || !strings.Contains(body, "master_key") {
		t.Errorf("the session after the reload: %d %s", code, body)
	}
	if code, body := call(t, "POST", base+"/console/logout", "", "", "Cookie", cookie, "X-LLMflow-CSRF", sess.CSRF); code != 200 {
		t.Errorf("sign out: %d %s", code, body)
	}
	if code, _ := call(t, "GET", base+"/admin/whoami", "", "", "Cookie", cookie); code != 401 {
		t.Errorf("after signing out: %d", code)
	}
}
