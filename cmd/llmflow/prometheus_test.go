package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// The repository's monitoring files, checked here against a real
// Prometheus.
const (
	rulesFile     = "../../dashboards/llmflow-rules.yml"
	rulesTestFile = "../../dashboards/llmflow-rules.test.yml"
	dashboardFile = "../../dashboards/llmflow-grafana.json"
)

// needPrometheus returns the paths of Debian's prometheus and promtool;
// the test is skipped, saying so, only when they are not installed.
func needPrometheus(t *testing.T) (prom, promtool string) {
	t.Helper()
	var err1, err2 error
	prom, err1 = exec.LookPath("prometheus")
	promtool, err2 = exec.LookPath("promtool")
	if err1 != nil || err2 != nil {
		t.Skip("prometheus is not installed (apt-get install prometheus; scripts/test.sh installs it): the alert rules and the dashboard are not checked")
	}
	return prom, promtool
}

// TestAlertRules: promtool accepts the rules, and their unit tests pass
// (each alert fires on its condition after its `for`, not before).
func TestAlertRules(t *testing.T) {
	_, promtool := needPrometheus(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard:
// the panels' targets and the template variables' queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: no uid or title", dashboardFile)
	}
	var exprs []string
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource is not the dashboard's ${datasource} variable (not importable as is)", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" {
				t.Errorf("panel %q: a target without expr or refId", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, _ := q["query"].(string); s != "" {
				exprs = append(exprs, s)
			}
		}
	}
	return exprs
}

var (
	seriesName = regexp.MustCompile(`\bllmflow_[a-z0-9_]+\b`)
	ruleExpr   = regexp.MustCompile(`(?m)^\s+expr:\s*(?:>-\n)?((?:.|\n)*?)\n\s+(?:for|labels):`)
	ruleFor    = regexp.MustCompile(`(?m)^(\s+)for: \S+$`)
	// labelValues is a Grafana variable's query label_values(series, label).
	labelValues = regexp.MustCompile(`^label_values\((\w+), (\w+)\)$`)
	// gpuHoursLint is promtool's finding on a series in GPU-hours.
	gpuHoursLint = regexp.MustCompile(`^llmflow_[a-z_]*gpu_hours[a-z_]* use base unit "seconds" instead of "hours"$`)
)

// grafanaVars replaces the dashboard's variables with what Grafana would
// send, so that an expression can be evaluated by Prometheus as is.
var grafanaVars = strings.NewReplacer(`"$pool"`, `".*"`, `"$org"`, `".*"`, "$__rate_interval", "1m", "$__range", "5m")

// TestPrometheusRulesAndDashboard runs Debian's prometheus against a real
// gateway process with every optional block that has metrics (Slurm
// import, write-back, Redis, alerts, TLS, a budget), two simulated vLLM
// upstreams and some traffic: `promtool check metrics` accepts the scrape,
// every series the rules and the dashboard query exists in Prometheus,
// every dashboard expression evaluates, and killing an upstream drives
// LLMflowUpstreamDown to firing, seen through Prometheus's alerts API (the
// rules' `for` shortened to 1s in the copy Prometheus loads: what is
// tested is the expression on real series, the durations are
// promtool-tested in TestAlertRules).
func TestPrometheusRulesAndDashboard(t *testing.T) {
	prom, promtool := needPrometheus(t)
	dir := t.TempDir()

	// Two engines: sim1 is killed later.
	sims := make([]*httptest.Server, 2)
	for i := range sims {
		sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: time.Millisecond,
			Sched: vllmsim.SchedConfig{MaxNumSeqs: 64, KVBlocks: 1 << 14}})
		sims[i] = httptest.NewServer(sim)
		t.Cleanup(func() { sims[i].Close(); sim.Close() })
	}
	redis := startRedis(t, freeAddr(t))
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(hook.Close)

	cert := testCert(t, 1, filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"))
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("master.key", procMasterKey+"\n", 0o600)
	write("vllm.key", "sim-secret\n", 0o600)
	write("wb.dsn", "llmflow:secret@tcp(127.0.0.1:1)/slurm_acct_db\n", 0o600) // nothing listens: the write-back fails
	write("sacctmgr", "#!/bin/sh\necho 'sacctmgr: error: Problem talking to the database: Connection refused' >&2\nexit 1\n", 0o755)
	adminAddr := freeAddr(t)
	write("gateway.hcl", fmt.Sprintf(`master_key_file = "master.key"
org "etabA" {
  share = 0.75
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.25
  team "lab-chem" {}
}
pool "sim" {
  capacity  = 8
  gpus      = 2
  scheduler = "gateway" # a gateway-side queue: its series too
}
model "sim-llama" {
  upstream_model = "sim/llama"
  pool           = "sim"
  key_file       = "vllm.key"
  upstream "sim0" { base_url = %q }
  upstream "sim1" { base_url = %q }
}
store { path = "llmflow.db" }
health {
  interval = "200ms"
  timeout  = "1s"
  cooldown = "1s"
}
admin { listen = %q }
tls {
  cert_file = "gw.crt"
  key_file  = "gw.key"
}
redis { address = %q }
slurm {
  source        = "sacctmgr"
  cluster       = "hpc"
  sacctmgr_path = %q
}
writeback {
  dsn_file = "wb.dsn"
  schedule = "@every 1s"
}
alerts { webhook_url = %q }
`, sims[0].URL, sims[1].URL, adminAddr, redis.addr, filepath.Join(dir, "sacctmgr"), hook.URL), 0o600)
	gw := startServe(t, filepath.Join(dir, "gateway.hcl"))
	base := strings.Replace(gw.base, "http://", "https://", 1)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(client.CloseIdleConnections)

	// A key, a budget and some traffic, streamed and not.
	_, key := procAdmin(t, http.MethodPost, "http://"+adminAddr+"/admin/keys", `{"team":"lab-nlp","name":"prom"}`)
	if key == "" {
		t.Fatalf("no key created:\n%s", gw.logs)
	}
	if st, _ := procAdmin(t, http.MethodPut, "http://"+adminAddr+"/admin/budgets", `{"kind":"team","name":"lab-nlp","period":"month","max_cost":500}`); st != http.StatusOK {
		t.Fatalf("PUT /admin/budgets: %d", st)
	}
	for i := range 6 {
		body := fmt.Sprintf(`{"model":"sim-llama","stream":%v,"max_tokens":8,"messages":[{"role":"user","content":"hello %d"}]}`, i%2 == 0, i)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}

	// promtool check metrics: the exposition as Prometheus's linter sees it.
	scrape := func() string {
		t.Helper()
		resp, err := client.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(scrape())
	out, err := check.CombinedOutput()
	if err != nil {
		// GPU-hours are llmflow's unit of account (sreport's, budgets',
		// reports'): the linter's wish for seconds is the one finding let
		// through, for those series alone.
		var other []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !gpuHoursLint.MatchString(l) {
				other = append(other, l)
			}
		}
		if len(other) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, strings.Join(other, "\n"))
		}
	}

	// Prometheus, scraping the gateway every second with the rules loaded.
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	write("rules.yml", ruleFor.ReplaceAllString(string(rules), "${1}for: 1s"), 0o644)
	write("prometheus.yml", fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: llmflow
    scheme: https
    tls_config:
      ca_file: gw.crt
    static_configs:
      - targets: [%q]
`, strings.TrimPrefix(gw.base, "http://")), 0o644)
	promAddr := freeAddr(t)
	var promLog syncBuf
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &promLog, &promLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitExplained(t, 60*time.Second, func() bool {
		resp, err := http.Get("http://" + promAddr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string { return "prometheus is not ready:\n" + promLog.String() })
	api := "http://" + promAddr + "/api/v1/"
	// query evaluates expr now and returns its result's samples (nil on
	// an error, which is reported).
	type sample struct {
		Metric map[string]string `json:"metric"`
	}
	query := func(expr string) ([]sample, error) {
		resp, err := http.Get(api + "query?query=" + url.QueryEscape(expr))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var v struct {
			Status, Error string
			Data          struct {
				Result json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			return nil, err
		}
		if v.Status != "success" {
			return nil, fmt.Errorf("%s", v.Error)
		}
		var s []sample
		json.Unmarshal(v.Data.Result, &s) // a scalar result has no samples
		return s, nil
	}
	// The names queried by the rules and the dashboard, all scraped.
	var exprs []string
	for _, m := range ruleExpr.FindAllStringSubmatch(string(rules), -1) {
		exprs = append(exprs, m[1])
	}
	if len(exprs) < 13 {
		t.Fatalf("found %d rule expressions in %s", len(exprs), rulesFile)
	}
	dash := dashboardExprs(t)
	exprs = append(exprs, dash...)
	var names []string
	for _, e := range exprs {
		names = append(names, seriesName.FindAllString(e, -1)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var missing []string
	waitExplained(t, 90*time.Second, func() bool {
		missing = missing[:0]
		for _, n := range names {
			if s, err := query("count(" + n + ")"); err != nil || len(s) == 0 {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0
	}, func() string {
		return fmt.Sprintf("series queried by the rules or the dashboard, not in Prometheus: %v\nprometheus:\n%s", missing, promLog.String())
	})
	t.Logf("%d series names queried by %d expressions, all scraped", len(names), len(exprs))
	for _, e := range dash {
		q := grafanaVars.Replace(e)
		lv := labelValues.FindStringSubmatch(e)
		if lv != nil { // a variable's values: the label must be there
			q = "count by (" + lv[2] + ") (" + lv[1] + ")"
		}
		s, err := query(q)
		switch {
		case err != nil:
			t.Errorf("dashboard expression %q: %v", e, err)
		case lv != nil && (len(s) == 0 || s[0].Metric[lv[2]] == ""):
			t.Errorf("dashboard variable %q has no values", e)
		}
	}

	// A real fault: sim1 goes away. Before it, no upstream alert.
	firing := func(name string) []map[string]string {
		resp, err := http.Get(api + "alerts")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&v)
		var out []map[string]string
		for _, a := range v.Data.Alerts {
			if a.Labels["alertname"] == name && a.State == "firing" {
				out = append(out, a.Labels)
			}
		}
		return out
	}
	if a := firing("LLMflowUpstreamDown"); len(a) > 0 {
		t.Fatalf("LLMflowUpstreamDown fires with both upstreams up: %v", a)
	}
	sims[1].CloseClientConnections()
	sims[1].Close()
	var down []map[string]string
	waitExplained(t, 60*time.Second, func() bool {
		down = firing("LLMflowUpstreamDown")
		return len(down) > 0
	}, func() string { return "LLMflowUpstreamDown never fired after sim1 was killed\n" + gw.logs.String() })
	if len(down) != 1 || down[0]["upstream"] != "sim1" || down[0]["pool"] != "sim" || down[0]["severity"] != "warning" {
		t.Errorf("LLMflowUpstreamDown fires for %v, want sim1 of pool sim alone", down)
	}
	if a := firing("LLMflowPoolDown"); len(a) > 0 {
		t.Errorf("LLMflowPoolDown fires with sim0 up: %v", a)
	}
	// The failing Slurm import and write-back are real faults too.
	for _, name := range []string{"LLMflowSlurmSyncFailing", "LLMflowWritebackFailing", "LLMflowCertificateExpiresVerySoon"} {
		waitExplained(t, 60*time.Second, func() bool { return len(firing(name)) > 0 }, func() string {
			return name + " does not fire (the import and write-back fail, the certificate ends within the hour)\n" + gw.logs.String()
		})
	}
	for _, name := range []string{"LLMflowRedisFallback", "LLMflowBudgetsStale", "LLMflowAccountingDropping"} {
		if a := firing(name); len(a) > 0 {
			t.Errorf("%s fires on a gateway without that fault: %v", name, a)
		}
	}
}

// waitExplained polls cond until it holds; past d the test fails with msg(),
// computed then (the state that explains the wait).
func waitExplained(t *testing.T, d time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, msg())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
