package gateway

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Trusted proxies (limits.trusted_proxies): nginx in front of the
// replicas, or a chat front end calling llmflow for all its users, carry
// everyone's requests on connections from one address. The connection
// cap per network does not count their connections; the requests they
// forward count instead, per client network as X-Forwarded-For names it,
// against max_connections_per_network requests at once, and the auth
// failure limit counts them there too.

// trustedProxies are the configured networks of the proxies.
type trustedProxies []netip.Prefix

// contains reports whether the address of remoteAddr (host:port) is in
// one of the networks.
func (t trustedProxies) contains(remoteAddr string) bool {
	if len(t) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	return t.has(ap.Addr())
}

func (t trustedProxies) has(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client returns the client address of a request that came from a
// trusted proxy: the last address of X-Forwarded-For outside the trusted
// networks (each proxy appends the address it got the request from), or
// the first one when all are trusted; the proxy's own address when the
// header names none. It allocates nothing for a well-formed header.
func (t trustedProxies) client(r *http.Request) string {
	var first string
	vals := r.Header["X-Forwarded-For"]
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for v != "" {
			j := strings.LastIndexByte(v, ',')
			s := strings.TrimSpace(v[j+1:])
			v = v[:max(j, 0)]
			if j < 0 {
				v = ""
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if !t.has(a) {
				return s
			}
			first = s
		}
	}
	if first != "" {
		return first
	}
	return r.RemoteAddr
}

// clientAddr is the address a request counts at: the forwarded client of
// a trusted proxy's request, else the peer's.
func (g *Gateway) clientAddr(r *http.Request) string {
	if g.proxies.contains(r.RemoteAddr) {
		return g.proxies.client(r)
	}
	return r.RemoteAddr
}

// proxiedLimit caps the requests in flight per client network among those
// trusted proxies forward (the connection cap per network, applied where
// the connections cannot tell clients apart).
type proxiedLimit struct {
	max   int
	mu    sync.Mutex
	byNet map[netip.Prefix]int
}

// errProxiedLimit is the answer over the cap, as the connection cap's.
var errProxiedLimit = []byte(`{"error":{"message":"too many open connections from your network; retry later","type":"server_error","param":null,"code":"service_unavailable"}}` + "\n")

// admitProxied counts r in its client network's requests when it came
// from a trusted proxy, and returns the function that gives its place
// back (nil when it does not count); ok false, having answered 503, when
// the network is at its cap.
func (g *Gateway) admitProxied(w http.ResponseWriter, r *http.Request) (done func(), ok bool) {
	l := g.proxied
	if l == nil || !g.proxies.contains(r.RemoteAddr) {
		return nil, true
	}
	client := g.proxies.client(r)
	n := clientNetwork(client)
	l.mu.Lock()
	if l.byNet[n] >= l.max {
		l.mu.Unlock()
		g.m.connRefused.WithLabelValues(connRefusedNetwork).Inc()
		g.logRefusal(connRefusedNetwork, client, r.RemoteAddr)
		h := w.Header()
		h["Content-Type"] = hdrJSON
		h["Retry-After"] = []string{"1"}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(errProxiedLimit)
		return nil, false
	}
	l.byNet[n]++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		if l.byNet[n]--; l.byNet[n] <= 0 {
			delete(l.byNet, n)
		}
		l.mu.Unlock()
	}, true
}

// refusalLog limits the log of refused connections and requests to one
// line a second, with the number refused since the last line.
type refusalLog struct {
	last    atomic.Int64 // unix nanos of the last line
	skipped atomic.Int64
}

// logRefusal logs a connection or request refused by a connection cap:
// which cap, the client address and the peer's (a proxy's, or the same).
func (g *Gateway) logRefusal(reason, client, peer string) {
	now := time.Now().UnixNano()
	last := g.refusals.last.Load()
	if now-last < int64(time.Second) || !g.refusals.last.CompareAndSwap(last, now) {
		g.refusals.skipped.Add(1)
		return
	}
	g.log.Warn("connection cap: refused", "reason", reason, "client", client, "peer", peer,
		"refused_since_last", g.refusals.skipped.Swap(0))
}
