package gateway

import (
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Connection refusal reasons (llmflow_connections_refused_total).
const (
	connRefusedGlobal  = "max_connections"
	connRefusedNetwork = "max_connections_per_network"
)

// refusalBodies are the raw answers to a refused connection: HTTP/1.1 503
// with an OpenAI-shaped error and Connection: close.
var refusalBodies = map[string][]byte{
	connRefusedGlobal:  refusal("the gateway has too many open connections; retry later"),
	connRefusedNetwork: refusal("too many open connections from your network; retry later"),
}

func refusal(msg string) []byte {
	body := `{"error":{"message":"` + msg + `","type":"server_error","param":null,"code":"service_unavailable"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Connection: close\r\n" +
		"Retry-After: 1\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// maxRefusing bounds the refused connections being answered at once;
// beyond it a refused connection is closed without an answer.
const maxRefusing = 64

// connLimiter is a net.Listener that caps the connections open at once,
// in all (max) and per client network (perNetwork; an IPv4 address, an
// IPv6 /64, as the auth failure limit counts them). 0 disables a cap.
//
// A connection over a cap is accepted and refused at once: it gets a raw
// "HTTP/1.1 503" with an OpenAI-shaped JSON error and Connection: close
// (written with a short deadline, on a goroutine of a bounded set; when
// that set is full, or the write would block, the connection is just
// closed), never reaches the HTTP server, and is counted by refused.
// Accept never blocks on a cap, so the kernel backlog never fills.
type connLimiter struct {
	net.Listener
	max, perNetwork int
	refused         func(reason string, c net.Conn) // counts and logs refusals; may be nil
	// trusted proxies' connections are not counted per network: their
	// requests are, per forwarded client (admitProxied)
	trusted trustedProxies

	open     atomic.Int64
	mu       sync.Mutex
	byNet    map[netip.Prefix]int
	refusing atomic.Int64
}

// LimitListener wraps l with the connection caps of the configuration
// (limits.max_connections, max_connections_per_network), counting
// refusals in llmflow_connections_refused_total. With both caps 0 it
// returns l.
func (g *Gateway) LimitListener(l net.Listener) net.Listener {
	lim := g.cfg.Limits
	if lim.MaxConnections <= 0 && lim.MaxConnectionsPerNetwork <= 0 {
		return l
	}
	cl := newConnLimiter(l, lim.MaxConnections, lim.MaxConnectionsPerNetwork, func(reason string, c net.Conn) {
		g.m.connRefused.WithLabelValues(reason).Inc()
		addr := c.RemoteAddr().String()
		g.logRefusal(reason, addr, addr)
	})
	cl.trusted = lim.TrustedProxies
	return cl
}

func newConnLimiter(l net.Listener, max, perNetwork int, refused func(string, net.Conn)) *connLimiter {
	return &connLimiter{Listener: l, max: max, perNetwork: perNetwork, refused: refused, byNet: make(map[netip.Prefix]int)}
}

// Accept returns the next connection within the caps, refusing the others.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := c.RemoteAddr().String()
		n, perNet := clientNetwork(addr), !l.trusted.contains(addr)
		if reason := l.take(n, perNet); reason != "" {
			l.refuse(c, reason)
			continue
		}
		return &limitedConn{Conn: c, l: l, n: n, perNet: perNet}, nil
	}
}

// take counts a new connection from n (per network when perNet), or
// returns the cap it would pass.
func (l *connLimiter) take(n netip.Prefix, perNet bool) string {
	if open := l.open.Add(1); l.max > 0 && open > int64(l.max) {
		l.open.Add(-1)
		return connRefusedGlobal
	}
	if l.perNetwork > 0 && perNet {
		l.mu.Lock()
		if l.byNet[n] >= l.perNetwork {
			l.mu.Unlock()
			l.open.Add(-1)
			return connRefusedNetwork
		}
		l.byNet[n]++
		l.mu.Unlock()
	}
	return ""
}

// done gives back what take counted.
func (l *connLimiter) done(n netip.Prefix, perNet bool) {
	l.open.Add(-1)
	if l.perNetwork > 0 && perNet {
		l.mu.Lock()
		if l.byNet[n]--; l.byNet[n] <= 0 {
			delete(l.byNet, n)
		}
		l.mu.Unlock()
	}
}

// refuse answers c with the 503 of reason and closes it, off the accept
// loop. The request the client may already have sent is read (briefly,
// boundedly) after the answer so closing does not reset the connection
// before the client reads it.
func (l *connLimiter) refuse(c net.Conn, reason string) {
	if l.refused != nil {
		l.refused(reason, c)
	}
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		// The answer goes after the request's first bytes (waited for
		// briefly): a client whose connection is answered before it sent
		// anything sees an "unsolicited response" and an error, not a 503
		// (Go's net/http client does).
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var first [1]byte
		c.Read(first[:])
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(refusalBodies[reason]); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// limitedConn gives its place back once, on the first Close.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	n      netip.Prefix
	perNet bool
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.done(c.n, c.perNet)
	}
	return c.Conn.Close()
}

// NetConn is the accepted connection, for the client listener's server
// to reach its socket (as tls.Conn.NetConn).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }
