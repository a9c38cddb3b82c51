package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// probeFunc is a RoundTripper made of a function.
type probeFunc func(*http.Request) (*http.Response, error)

func (f probeFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func status(code int) *http.Response {
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(""))}
}

// A backend whose probe hangs delays no other backend's probe: the other
// is marked down within one interval of failing, and run returns only
// once every probe, the hung one included, has stopped.
func TestHealthChecker_HungProbeDelaysNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		hung, flaky := &backend{base: "http://hung", name: "hung"}, &backend{base: "http://flaky", name: "flaky"}
		var hungActive, flakyProbes atomic.Int64
		var flakyDown atomic.Bool
		hungRT := probeFunc(func(r *http.Request) (*http.Response, error) {
			hungActive.Add(1)
			defer hungActive.Add(-1)
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		flakyRT := probeFunc(func(r *http.Request) (*http.Response, error) {
			flakyProbes.Add(1)
			if flakyDown.Load() {
				return status(http.StatusServiceUnavailable), nil
			}
			return status(http.StatusOK), nil
		})
		h := &healthChecker{
			backends: []*backend{hung, flaky}, // the hung one first, as a sequential loop would meet it
			client: func(b *backend) http.RoundTripper {
				if b == hung {
					return hungRT
				}
				return flakyRT
			},
			cfg: config.Health{Interval: interval, Timeout: time.Hour, Cooldown: time.Hour, Path: "/health"},
			now: time.Now,
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			h.run(ctx)
			close(done)
		}()
		synctest.Wait()
		if n := flakyProbes.Load(); n != 1 {
			t.Fatalf("%d probes of the healthy backend at start, want 1 (not after the hung one)", n)
		}
		time.Sleep(interval / 2)
		flakyDown.Store(true)
		time.Sleep(interval / 2)
		synctest.Wait()
		if flaky.up(time.Now()) {
			t.Errorf("the failing backend is still up one interval later (%d probes)", flakyProbes.Load())
		}
		if hungActive.Load() != 1 {
			t.Errorf("%d hung probes running, want 1", hungActive.Load())
		}
		cancel()
		<-done
		if n := hungActive.Load(); n != 0 {
			t.Errorf("run returned with %d probes still running", n)
		}
	})
}

// The same through real servers: one upstream hangs on its health path
// until the test ends, the other goes down and is taken out of rotation
// within about one interval, long before the hung probe's timeout.
func TestActiveHealthChecks_HungUpstream(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // runs before hung.Close
	var down atomic.Bool
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	e := newEnv(t, []string{hung.URL, up.srv.URL}, "health {\n interval = \"20ms\"\n timeout = \"30s\"\n cooldown = \"1h\"\n}\n")
	var b *backend
	for _, x := range e.gw.backends {
		if strings.HasPrefix(up.srv.URL, x.base) || strings.HasPrefix(x.base, up.srv.URL) {
			b = x
		}
	}
	if b == nil {
		t.Fatal("no backend for the healthy upstream")
	}
	e.gw.Start(t.Context())
	time.Sleep(50 * time.Millisecond) // a few intervals: the hung probe is stuck by now
	if !b.up(time.Now()) {
		t.Fatal("the healthy upstream is down")
	}
	down.Store(true)
	start := time.Now()
	for b.up(time.Now()) {
		if time.Since(start) > 2*time.Second {
			t.Fatal("the failing upstream is still up after 2s (the hung probe's timeout is 30s)")
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("marked down %v after it failed (interval 20ms)", time.Since(start).Round(time.Millisecond))
}

// pinger answers Ping with err.
type pinger struct{ err error }

func (p pinger) Ping(context.Context) error { return p.err }

// /healthz pings the store only through Options.Pinger: nil pings
// nothing; a failing one makes the store unreachable (and, the store
// failing closed by default, the gateway unavailable).
func TestHealthzStorePinger(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	for _, tc := range []struct {
		name          string
		p             Pinger
		code          int
		store, status string
	}{
		{"nil", nil, 200, `"store":"ok"`, `"status":"ok"`},
		{"answers", pinger{}, 200, `"store":"ok"`, `"status":"ok"`},
		{"fails", pinger{errors.New("connection refused")}, 503, `"store":"unreachable"`, `"status":"unavailable"`},
	} {
		e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Pinger = tc.p })
		req, _ := http.NewRequest("GET", e.srv.URL+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer "+gatewaytest.MasterKey)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.store) || !strings.Contains(string(b), tc.status) {
			t.Errorf("%s: healthz %d %s, want %d, %s and %s", tc.name, resp.StatusCode, b, tc.code, tc.store, tc.status)
		}
	}
}
