package doctor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
)

// upstreamCheck names the check of upstream u of model m.
func upstreamCheck(m config.Model, u config.Upstream) string {
	return fmt.Sprintf("upstream %q of model %q", u.Name, m.Name)
}

// checkUpstream asks the engine behind u what serve will: its model list
// (reachable, the key accepted, the upstream model served), whether it
// runs the priority scheduler when the pool sends priorities (one
// completion of one token with a priority: vLLM without
// --scheduling-policy priority refuses it), and its /metrics.
func (r *run) checkUpstream(ctx context.Context, m config.Model, u config.Upstream) {
	name := upstreamCheck(m, u)
	base := u.BaseURL.String()
	fail := func(msg, fix string) { r.add(Finding{Check: name, Status: Fail, Message: base + ": " + msg, Fix: fix}) }
	var key string
	if kf := cmp.Or(u.KeyFile, m.KeyFile); kf != "" {
		var err error
		if key, err = config.ReadSecret(kf); err != nil {
			fail("key_file: "+err.Error(), "see the secrets finding")
			return
		}
	}
	code, body, err := r.call(ctx, http.MethodGet, base+"/v1/models", key, nil, nil, "engine "+u.Name)
	if err != nil {
		fail(err.Error(), "start the engine, or fix base_url (scheme, host, port); the gateway host must reach it")
		return
	}
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		fail(fmt.Sprintf("GET /v1/models: %d, the engine refuses the key", code), "key_file must hold the engine's --api-key")
		return
	case code != http.StatusOK:
		fail(fmt.Sprintf("GET /v1/models: %d %s", code, snippet(body)), "base_url must be the engine's root (without /v1)")
		return
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		fail("GET /v1/models: not an OpenAI model list: "+err.Error(), "base_url must be an OpenAI-compatible engine's root")
		return
	}
	var ids []string
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	if !slices.Contains(ids, m.UpstreamModel) {
		fail(fmt.Sprintf("serves %q, not %q", ids, m.UpstreamModel),
			fmt.Sprintf("set upstream_model to what the engine serves, or start it with --served-model-name %s", m.UpstreamModel))
		return
	}
	found := []string{"serves " + m.UpstreamModel}

	var pool *config.Pool
	for i := range r.cfg.Pools {
		if r.cfg.Pools[i].Name == m.Pool {
			pool = &r.cfg.Pools[i]
		}
	}
	if pool != nil && pool.Engine.Scheduling == engine.Priority {
		req := map[string]any{"model": m.UpstreamModel, "prompt": "llmflow doctor", "max_tokens": 1}
		hdr := http.Header{}
		if pool.Engine.PriorityBody {
			req["priority"] = 1
		}
		if pool.Engine.PriorityHeader != "" {
			hdr.Set(pool.Engine.PriorityHeader, "1")
		}
		b, _ := json.Marshal(req)
		code, body, err := r.call(ctx, http.MethodPost, base+"/v1/completions", key, hdr, b, "")
		switch {
		case err != nil:
			fail("the priority probe (one completion of one token): "+err.Error(), "check the engine's log")
			return
		case code == http.StatusBadRequest && bytes.Contains(bytes.ToLower(body), []byte("priority scheduling is not enabled")):
			fail(fmt.Sprintf("the engine refuses priorities (%s), and pool %q sends them", snippet(body), pool.Name),
				fmt.Sprintf("start vLLM with --scheduling-policy priority, or set pool %q { scheduler = \"gateway\" } for an engine without it", pool.Name))
			return
		case code != http.StatusOK:
			r.add(Finding{Check: name, Status: Warn, Message: fmt.Sprintf("%s: the priority probe answered %d %s", base, code, snippet(body)),
				Fix: "check that the engine runs vLLM's priority scheduler (--scheduling-policy priority)"})
		default:
			found = append(found, "priority scheduling on")
		}
	}

	// The engine kind's series the gateway reads (capacity = "auto"):
	// none known, nothing to check.
	var series string
	if pool != nil {
		series = pool.Engine.Metrics.Running
	}
	if series != "" {
		code, body, err = r.call(ctx, http.MethodGet, base+"/metrics", key, nil, nil, "")
		switch {
		case err != nil:
			fail("GET /metrics: "+err.Error(), "check the engine's log")
			return
		case code != http.StatusOK:
			fail(fmt.Sprintf("GET /metrics: %d, metrics not readable", code), "let the gateway host read the engine's /metrics (a proxy in front of it may hide it)")
			return
		case !bytes.Contains(body, []byte(series)):
			fail(fmt.Sprintf("GET /metrics: no %s series in the answer", series),
				fmt.Sprintf("base_url must be the %s engine's own root (pool %q { engine })", pool.Engine.Kind, pool.Name))
			return
		}
		found = append(found, "metrics readable")
	}
	r.add(Finding{Check: name, Status: OK, Message: base + ": " + strings.Join(found, ", ")})
}

// call sends one request with the key, reads at most 1 MiB of the answer
// and, when clockOf is not "", records the answer's Date as a clock
// reference of that name.
func (r *run) call(ctx context.Context, method, url, key string, hdr http.Header, body []byte, clockOf string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	sent := r.o.Now()
	resp, err := r.o.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if clockOf != "" {
		if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			got := r.o.Now()
			r.clock(clockRef{source: clockOf, theirs: d, at: sent.Add(got.Sub(sent) / 2), resolution: time.Second})
		}
	}
	return resp.StatusCode, b, nil
}

// snippet is the start of an engine's answer, for a message.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
