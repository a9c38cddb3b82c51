package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// adminCall sends an admin request with the master key and the given
// headers; it returns the status and the body.
func adminCall(t *testing.T, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// openAIError checks body is an OpenAI-shaped error with code.
func openAIError(t *testing.T, what, body, code string) {
	t.Helper()
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("%s: body %s, want an OpenAI error with code %q", what, body, code)
	}
}

// TestAdminListener runs serve as an admin would with admin { listen }:
// /admin/* is served there and nowhere else (the client listener answers
// 404 as for any unknown path, the admin listener serves nothing else);
// the CLI administers through it; browser writes from another origin are
// refused (403, OpenAI-shaped) unless allowed, reads and non-browser
// writes pass; a SIGHUP that moves the listener keeps it where it is.
func TestAdminListener(t *testing.T) {
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	adminAddr := freeAddr(t)
	cfg := procConfig(t, dir, sim, "store {\n  path = \"llmflow.db\"\n}\nadmin {\n  listen = \""+adminAddr+"\"\n  allowed_origins = [\"https://console.example.org\"]\n}\n")
	p := startServe(t, cfg)
	adm := "http://" + adminAddr
	waitFor(t, 10*time.Second, "the admin listener", func() bool {
		resp, err := http.Get(adm + "/admin/whoami")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	// the client listener: /admin/* is unknown there; /v1 and /healthz are served
	for _, path := range []string{"/admin/keys", "/admin/whoami", "/admin"} {
		code, body := adminCall(t, http.MethodGet, p.base+path, "")
		if code != http.StatusNotFound {
			t.Errorf("client listener GET %s: %d %s", path, code, body)
		}
		openAIError(t, "client listener GET "+path, body, "not_found")
	}
	if code, body := adminCall(t, http.MethodPost, p.base+"/admin/keys", `{"team":"lab-nlp","name":"x"}`); code != http.StatusNotFound {
		t.Errorf("client listener POST /admin/keys: %d %s", code, body)
	}
	if code, _ := adminCall(t, http.MethodGet, p.base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("client listener /healthz: %d", code)
	}

	// the admin listener: the admin API only
	code, body := adminCall(t, http.MethodPost, adm+"/admin/keys", `{"team":"lab-nlp","name":"cli"}`)
	if code != http.StatusCreated {
		t.Fatalf("admin listener POST /admin/keys: %d %s", code, body)
	}
	var k struct{ Key string }
	json.Unmarshal([]byte(body), &k)
	for _, path := range []string{"/v1/models", "/healthz", "/metrics"} {
		code, body := adminCall(t, http.MethodGet, adm+path, "")
		if code != http.StatusNotFound {
			t.Errorf("admin listener GET %s: %d %s", path, code, body)
		}
	}
	// the key made there works on the client listener
	req, _ := http.NewRequest(http.MethodGet, p.base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+k.Key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the key created on the admin listener, on the client listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// the CLI, as the README shows it
	var out, errb bytes.Buffer
	if c := Run(context.Background(), []string{"admin", "--url", adm, "--token-file", filepath.Join(dir, "master.key"), "keys", "list", "-P"}, &out, &errb); c != 0 ||
		!strings.Contains(out.String(), "|cli\n") {
		t.Errorf("llmflow admin --url %s keys list: exit %d\n%s%s", adm, c, out.String(), errb.String())
	}

	// browsers: writes from another origin are refused, reads pass
	keyBody := `{"team":"lab-nlp","name":"web"}`
	for _, tc := range []struct {
		name   string
		method string
		hdr    []string
		want   int
	}{
		{"another origin", http.MethodPost, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"cross-site fetch", http.MethodPost, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"a sandboxed page", http.MethodPost, []string{"Origin", "null"}, http.StatusForbidden},
		{"another origin, DELETE", http.MethodDelete, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"an allowed origin", http.MethodPost, []string{"Origin", "https://console.example.org", "Sec-Fetch-Site", "cross-site"}, http.StatusCreated},
		{"the same origin", http.MethodPost, []string{"Origin", adm, "Sec-Fetch-Site", "same-origin"}, http.StatusCreated},
		{"no browser", http.MethodPost, nil, http.StatusCreated},
		{"a read from another origin", http.MethodGet, []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, http.StatusOK},
	} {
		path := "/admin/keys"
		if tc.method == http.MethodDelete {
			path = "/admin/keys/nope"
		}
		body := keyBody
		if tc.method == http.MethodGet {
			body = ""
		}
		code, got := adminCall(t, tc.method, adm+path, body, tc.hdr...)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, got, tc.want)
		}
		if tc.want == http.StatusForbidden {
			openAIError(t, tc.name, got, "forbidden")
		}
	}
	if !strings.Contains(p.logs.String(), "cross-origin admin write refused") {
		t.Error("the refusals are not logged")
	}

	// SIGHUP with the admin block moved: the listener stays, and says so
	src, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, bytes.Replace(src, []byte(adminAddr), []byte(freeAddr(t)), 1), 0o600)
	p.signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the reload", func() bool { return strings.Contains(p.logs.String(), "configuration reloaded") })
	if !strings.Contains(p.logs.String(), "admin { listen } changes at the next restart") {
		t.Errorf("the moved listener is not logged:\n%s", p.logs)
	}
	if code, body := adminCall(t, http.MethodGet, adm+"/admin/keys", ""); code != 200 {
		t.Errorf("admin listener after the reload: %d %s", code, body)
	}
	if code, _ := adminCall(t, http.MethodGet, p.base+"/admin/keys", ""); code != http.StatusNotFound {
		t.Errorf("client listener /admin/keys after the reload: %d", code)
	}
}

// TestAdminCrossOriginWithoutListener: without an admin listener the
// admin API is on the client listener, and browser writes from other
// origins are refused there too.
func TestAdminCrossOriginWithoutListener(t *testing.T) {
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	p := startServe(t, procConfig(t, dir, sim, "store {\n  path = \"llmflow.db\"\n}\n"))
	if code, body := adminCall(t, http.MethodPost, p.base+"/admin/keys", `{"team":"lab-nlp","name":"x"}`, "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("cross-origin POST /admin/keys: %d %s", code, body)
	}
	if code, body := adminCall(t, http.MethodPost, p.base+"/admin/keys", `{"team":"lab-nlp","name":"x"}`); code != http.StatusCreated {
		t.Errorf("POST /admin/keys: %d %s", code, body)
	}
	// client routes are not the admin API's: an inference request with an Origin is served
	if code, _ := adminCall(t, http.MethodGet, p.base+"/healthz", "", "Origin", "https://evil.example"); code != http.StatusOK {
		t.Errorf("/healthz with an Origin: %d", code)
	}
}
