package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Requests through a real gateway end up in the spend export, the
// admin spend report and the usage CSV.
func TestExportAndSpend(t *testing.T) {
	e := startE2E(t)
	for range 3 {
		req, _ := http.NewRequest("POST", e.base+"/v1/completions", strings.NewReader(`{"model":"sim-llama","prompt":"hello there","max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer "+e.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	from := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	to := time.Now().UTC().Add(2 * time.Hour).Format(time.RFC3339)
	// the admin API answers while the gateway runs, once the records are
	// written (flush_interval is 20ms)
	e.waitWritten(t, 3)
	req, _ := http.NewRequest("GET", e.base+"/admin/spend?from="+from+"&to="+to+"&group_by=org,team,model&format=parsable2", nil)
	req.Header.Set("Authorization", "Bearer master-e2e-0123456789abcdef0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "Org|Team|Model|Requests|PromptTokens|CompletionTokens|CachedTokens|GPUHours|EstimatedRequests\netabA|lab-nlp|sim-llama|3|"
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), want) {
		t.Fatalf("GET /admin/spend: %d\n%s\nwant prefix\n%s", resp.StatusCode, body, want)
	}
	req, _ = http.NewRequest("GET", e.base+"/admin/spend?from=yesterday", nil)
	req.Header.Set("Authorization", "Bearer master-e2e-0123456789abcdef0123456789")
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad from: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", e.base+"/admin/usage.csv?from="+from+"&to="+to, nil)
	req.Header.Set("Authorization", "Bearer master-e2e-0123456789abcdef0123456789")
	resp, _ = http.DefaultClient.Do(req)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") || !strings.HasPrefix(string(body), "team,pool,requests,") || !strings.Contains(string(body), "lab-nlp,sim,3,") {
		t.Errorf("usage.csv (%s):\n%s", ct, body)
	}

	e.stop()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"export", "-c", filepath.Join(e.dir, "gateway.hcl"), "--from", from, "--to", to, "--group-by", "team,pool"}, &out, &errb)
	if code != 0 || !strings.HasPrefix(out.String(), "team,pool,requests,") || !strings.Contains(out.String(), "lab-nlp,sim,3,") {
		t.Fatalf("export: %d\n%s%s", code, out.String(), errb.String())
	}
	path := filepath.Join(t.TempDir(), "oct.json")
	code = Run(context.Background(), []string{"export", "-c", filepath.Join(e.dir, "gateway.hcl"), "--from", from, "--to", to, "--format", "json", "-o", path}, &out, &errb)
	if code != 0 {
		t.Fatalf("export to a file: %d %s", code, errb.String())
	}
}
