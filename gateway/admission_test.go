package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/fairshare"
)

// countingCounters are in-memory counters that count what the gateway
// admits and releases through the Counters interface.
type countingCounters struct {
	*fairshare.MemCounters
	admits, releases atomic.Int64
}

func (c *countingCounters) Admit(ch *fairshare.Chain) fairshare.Placement {
	c.admits.Add(1)
	return c.MemCounters.Admit(ch)
}

func (c *countingCounters) Release(ch *fairshare.Chain, p fairshare.Placement, g float64, now time.Time) {
	c.releases.Add(1)
	c.MemCounters.Release(ch, p, g, now)
}

// counterSource hands out countingCounters per pool.
type counterSource struct {
	mu    sync.Mutex
	pools map[string]*countingCounters
}

func (s *counterSource) PoolCounters(pool string, hl time.Duration) fairshare.Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &countingCounters{MemCounters: fairshare.NewMemCounters(hl)}
	s.pools[pool] = c
	return c
}

// TestAdmissionReleasesEverything sends requests that end every way an
// admitted request can (answered, upstream error, unreachable upstream,
// client gone mid-answer) and requests refused by each step before the
// fair share: the counters see one release per admission and end at zero.
func TestAdmissionReleasesEverything(t *testing.T) {
	var fail atomic.Bool
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		switch {
		case fail.Load():
			w.WriteHeader(http.StatusInternalServerError)
		case strings.Contains(r.Header.Get("Accept"), "event-stream"):
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // never ends: the client leaves
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
		}
	})
	src := &counterSource{pools: map[string]*countingCounters{}}
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Counters = src })
	ctr := src.pools["p"]
	if ctr == nil {
		t.Fatal("the gateway did not take its counters from Options.Counters")
	}
	post := func(body string, hdr ...string) int {
		t.Helper()
		resp := e.post(t, "/v1/chat/completions", body, hdr...)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const ok = `{"model":"m","messages":[]}`
	for range 3 {
		if code := post(ok); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	fail.Store(true)
	if code := post(ok); code != http.StatusBadGateway {
		t.Fatalf("upstream error: status %d, want 502", code)
	}
	fail.Store(false)
	// refused before the fair share: no admission to release
	for _, c := range []struct {
		body string
		hdr  []string
		want int
	}{
		{ok, []string{"Authorization", "Bearer llmf-nope"}, http.StatusUnauthorized},
		{`{"model":`, nil, http.StatusBadRequest},
		{`{"model":"nope","messages":[]}`, nil, http.StatusNotFound},
	} {
		if code := post(c.body, c.hdr...); code != c.want {
			t.Fatalf("%s: status %d, want %d", c.body, code, c.want)
		}
	}
	// a stream whose client leaves
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	// an unreachable upstream
	up.srv.Close()
	if code := post(ok); code < 500 {
		t.Fatalf("unreachable upstream: status %d", code)
	}

	deadline := time.Now().Add(5 * time.Second)
	for ctr.releases.Load() < ctr.admits.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a, r := ctr.admits.Load(), ctr.releases.Load(); a != 6 || r != a {
		t.Errorf("admitted %d, released %d; want 6 and 6", a, r)
	}
	if in, b := ctr.PoolCounts(); in != 0 || b != 0 {
		t.Errorf("in flight %d, borrowing %d after every request ended", in, b)
	}
}
