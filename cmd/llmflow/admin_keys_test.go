package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/adminapi"
)

// TestAdminKeysCLI drives a key's life through llmflow admin keys against
// a running gateway: created with limits and tags, its limits changed,
// disabled (refused at once) and enabled again, revoked for good.
func TestAdminKeysCLI(t *testing.T) {
	e := startE2E(t)
	master := filepath.Join(e.dir, "master.key")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"admin", "--url", e.base, "--token-file", master, "keys"}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	secret, errs, code := run("add", "--team", "lab-nlp", "--name", "ci", "--rpm", "100", "--tag", "x,y", "--tag", "z")
	m := regexp.MustCompile(`^key (key_[0-9a-f]+) created`).FindStringSubmatch(errs)
	if code != 0 || m == nil {
		t.Fatalf("keys add: exit %d\n%s%s", code, secret, errs)
	}
	id, secret := m[1], strings.TrimSpace(secret)
	c, err := adminapi.New(e.base, "master-e2e-0123456789abcdef0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func() adminapi.Key {
		t.Helper()
		ks, err := c.Keys(t.Context(), adminapi.KeyQuery{Team: "lab-nlp", IncludeRevoked: true})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ks, func(k adminapi.Key) bool { return k.ID == id })
		if i < 0 {
			t.Fatalf("key %s not listed", id)
		}
		return ks[i]
	}
	if k := key(); k.RPM != 100 || k.TPM != 0 || !slices.Equal(k.Tags, []string{"x", "y", "z"}) || !k.Active {
		t.Errorf("created key %+v", k)
	}
	status := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(); s != http.StatusOK {
		t.Fatalf("new key: %d", s)
	}

	out, errs, code := run("limits", id, "--tpm", "5000", "--max-inflight", "2")
	if code != 0 || out != "key "+id+": rpm 0, tpm 5000, max_inflight 2\n" {
		t.Errorf("keys limits: exit %d %q %s", code, out, errs)
	}
	if k := key(); k.RPM != 0 || k.TPM != 5000 || k.MaxInFlight != 2 {
		t.Errorf("after keys limits: %+v", k)
	}
	if _, errs, code := run("limits", id, "--rpm", "-1"); code != 1 || !strings.Contains(errs, "400 Bad Request") {
		t.Errorf("negative limit: exit %d %s", code, errs)
	}

	if out, errs, code := run("disable", id); code != 0 || out != "key "+id+" disabled\n" {
		t.Errorf("keys disable: exit %d %q %s", code, out, errs)
	}
	if k := key(); k.Active || !k.Disabled {
		t.Errorf("after keys disable: %+v", k)
	}
	if s := status(); s != http.StatusForbidden {
		t.Errorf("disabled key: %d", s)
	}
	if out, errs, code := run("enable", id); code != 0 || out != "key "+id+" enabled\n" {
		t.Errorf("keys enable: exit %d %q %s", code, out, errs)
	}
	if s := status(); s != http.StatusOK {
		t.Errorf("enabled key: %d", s)
	}

	if _, errs, code := run("revoke", id); code != 0 {
		t.Fatalf("keys revoke: %s", errs)
	}
	if _, errs, code := run("enable", id); code != 1 || !strings.Contains(errs, "409 Conflict") || !strings.Contains(errs, "revoked") {
		t.Errorf("enable a revoked key: exit %d %s", code, errs)
	}
	if _, errs, code := run("disable", "key_0000000000000000"); code != 1 || !strings.Contains(errs, `404 Not Found: no key "key_0000000000000000"`) {
		t.Errorf("disable an unknown key: exit %d %s", code, errs)
	}
}

// TestAdminKeysExpiryRotateCLI: keys add --expires and --model, keys show
// (no secret), keys rotate --grace (the new secret on stdout alone, both
// working during the grace).
func TestAdminKeysExpiryRotateCLI(t *testing.T) {
	e := startE2E(t)
	master := filepath.Join(e.dir, "master.key")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"admin", "--url", e.base, "--token-file", master, "keys"}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	models := func(secret string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	secret, errs, code := run("add", "--team", "lab-nlp", "--name", "short", "--expires", "24h", "--model", "sim-llama")
	m := regexp.MustCompile(`^key (key_[0-9a-f]+) created`).FindStringSubmatch(errs)
	if code != 0 || m == nil {
		t.Fatalf("keys add: exit %d\n%s%s", code, secret, errs)
	}
	id, secret := m[1], strings.TrimSpace(secret)
	out, errs, code := run("show", id)
	var k adminapi.Key
	if err := json.Unmarshal([]byte(out), &k); code != 0 || err != nil {
		t.Fatalf("keys show: exit %d %v\n%s%s", code, err, out, errs)
	}
	if k.ExpiresAt == nil || time.Until(*k.ExpiresAt) < 23*time.Hour || !slices.Equal(k.Models, []string{"sim-llama"}) || strings.Contains(out, secret) {
		t.Errorf("keys show: %s", out)
	}
	if _, errs, code := run("add", "--team", "lab-nlp", "--model", "gpt-9"); code != 1 || !strings.Contains(errs, "unknown model") {
		t.Errorf("keys add --model gpt-9: exit %d %s", code, errs)
	}
	next, errs, code := run("rotate", id, "--grace", "30m")
	next = strings.TrimSpace(next)
	if code != 0 || !strings.HasPrefix(next, "llmf-") || strings.Contains(next, "\n") || !strings.Contains(errs, "the previous secret works until") {
		t.Fatalf("keys rotate: exit %d %q %s", code, next, errs)
	}
	for _, s := range []string{secret, next} {
		if c := models(s); c != http.StatusOK {
			t.Errorf("a secret in the grace: %d", c)
		}
	}
}
