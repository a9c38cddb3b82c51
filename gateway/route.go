package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"github.com/go-llmflow/llmflow/internal/h1"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
)

// pool is a set of engines sharing one capacity and one transport.
type pool struct {
	name            string
	capacity        int
	engine          engine.Descriptor // what the engines understand
	transport       http.RoundTripper
	upstreamSeconds prometheus.Observer
	fs              *fairshare.Pool  // the pool's fair-share state
	shared          admission.Shared // admits and releases the pool's requests (counters, budgets)
	// queue is the pool's gateway-side queue: every request goes through
	// it on engine.GatewayQueue engines, the borrowers on the others when
	// the pool reclaims; nil otherwise.
	queue   *queue
	reclaim engine.Reclaim
	victims *reclaimer    // the borrowers reclaim may preempt
	auto    *autoCapacity // capacity = "auto"; nil: C is fixed
}

// route is a client-facing model: where its requests go and what they cost.
type route struct {
	name          string
	upstreamModel string
	pool          *pool
	class         int // 0 interactive, 1 batch
	cost          llmflow.Cost
	maxTokens     int64 // per request, prompt and completion each (max_context_tokens, defaulted in newRoutes)
	// configured are the upstreams of the configuration, fixed; ups is
	// what requests pick from: those and the runtime upstreams of the
	// admin API, a copy-on-write list published whole (routing.go), so
	// the request path reads it with one atomic load and no lock.
	configured []*upstream
	maxOutput  int64 // output limit of a request under a budget that sets none (max_output_tokens)
	ups        atomic.Pointer[upstreamSet]
	authHdr    []string      // the model's key_file as a header, for runtime upstreams; nil = none
	rr         atomic.Uint32 // rotates the start of least-in-flight ties
}

// upstreamSet is one published list of a route's upstreams.
type upstreamSet struct{ list []*upstream }

// upstreams returns the list requests pick from now.
func (r *route) upstreams() []*upstream { return r.ups.Load().list }

// upstream is one engine endpoint of a route. Several routes may share an
// engine (one vLLM serving two model names): they share its backend state.
type upstream struct {
	name    string
	urls    [engine.NumEndpoints]*url.URL // per endpoint, parsed once
	authHdr []string                      // "Bearer <key>", nil = none
	b       *backend
}

// backend is the live state of one engine base URL.
type backend struct {
	base      string
	pool      string
	name      string
	inflight  atomic.Int64
	downUntil atomic.Int64 // unix nanoseconds; the engine is skipped before this
}

func (b *backend) up(now time.Time) bool { return now.UnixNano() >= b.downUntil.Load() }

// markDown takes the engine out of rotation for d.
func (b *backend) markDown(now time.Time, d time.Duration) { b.downUntil.Store(now.Add(d).UnixNano()) }

// pick returns the healthy upstream with the fewest requests in flight,
// skipping those in tried; ties rotate. nil when none is left.
func (r *route) pick(now time.Time, tried []*upstream) *upstream {
	ups := r.upstreams()
	n := len(ups)
	if n == 0 {
		return nil
	}
	start := int(r.rr.Add(1)) % n
	var best *upstream
	var bestN int64
	for i := range n {
		u := ups[(start+i)%n]
		if !u.b.up(now) || containsUpstream(tried, u) {
			continue
		}
		if f := u.b.inflight.Load(); best == nil || f < bestN {
			best, bestN = u, f
		}
	}
	return best
}

func containsUpstream(s []*upstream, u *upstream) bool {
	for _, x := range s {
		if x == u {
			return true
		}
	}
	return false
}

// newTransport builds a pool's transport: no environment proxy, no
// compression, an idle pool large enough for the pool's concurrency, and
// bounded dial and header waits. Redirects cannot be followed: the gateway
// calls RoundTrip directly. With limits.http_stack = "llmflow" plain-HTTP
// engines are reached by internal/h1's client (the answer read on the
// request's own goroutine); https engines by net/http's.
func newTransport(capacity int, lim config.Limits) http.RoundTripper {
	idle := min(max(capacity, 16), 4096)
	d := &net.Dialer{Timeout: lim.ConnectTimeout, KeepAlive: 30 * time.Second}
	std := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    lim.ConnectTimeout,
		MaxIdleConns:           idle * 2,
		MaxIdleConnsPerHost:    idle,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  lim.ResponseHeaderTimeout,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      false,
	}
	if lim.HTTPStack == config.HTTPStackNetHTTP {
		return std
	}
	return &h1.Transport{
		Dial:                   d.DialContext,
		ResponseHeaderTimeout:  lim.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdlePerHost:         idle,
		IdleTimeout:            90 * time.Second,
		Fallback:               std,
	}
}

// isConnError reports whether err means the engine could not be reached
// or dropped the connection before answering: worth marking it down and
// trying another.
func isConnError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}
