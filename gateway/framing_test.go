package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange writes req on a new TCP connection to the gateway and reads
// every response the server sends until it closes the connection or stays
// silent for a while. closed reports whether the server hung up.
func rawExchange(t *testing.T, addr, req string) (resps []*http.Response, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return resps, bodies, false // still open, nothing more said
			}
			return resps, bodies, true // EOF or reset: closed
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resps, bodies = append(resps, resp), append(bodies, string(b))
		if err != nil {
			return resps, bodies, true
		}
	}
}

// TestContentLengthWithTransferEncoding: a request framed by both
// Content-Length and Transfer-Encoding (RFC 9112 §6.1), or framed
// ambiguously otherwise, is refused or answered with its connection
// closed, so a second request smuggled in its body is never parsed.
func TestContentLengthWithTransferEncoding(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	addr := strings.TrimPrefix(e.srv.URL, "http://")

	const json = `{"model":"m","messages":[]}`
	smuggled := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + e.key +
		"\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(json)) + "\r\n\r\n" + json
	// A chunked body that ends early, the smuggled request after it: a
	// front end that believes the Content-Length sees one request, a
	// server that believes Transfer-Encoding two.
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(json), json) + smuggled
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + e.key + "\r\nContent-Type: application/json\r\n"

	for _, tc := range []struct {
		name    string
		proto   string // "" = HTTP/1.1
		headers string
		body    string
		refused bool // answered 4xx/5xx without reaching an engine
	}{
		{"CLAndChunked", "", "Content-Length: " + fmt.Sprint(len(chunked)) + "\r\nTransfer-Encoding: chunked\r\n", chunked, false},
		{"ChunkedAndCL", "", "Transfer-Encoding: chunked\r\nContent-Length: " + fmt.Sprint(len(chunked)) + "\r\n", chunked, false},
		{"CLAndChunkedIdentity", "", "Content-Length: " + fmt.Sprint(len(chunked)) + "\r\nTransfer-Encoding: chunked, identity\r\n", chunked, true},
		{"ChunkedAlone", "", "Transfer-Encoding: chunked\r\n", chunked, false},
		{"TwoTransferEncodings", "", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked, true},
		{"TwoContentLengths", "", "Content-Length: " + fmt.Sprint(len(json)) + "\r\nContent-Length: " + fmt.Sprint(len(json)+len(smuggled)) + "\r\n", json + smuggled, true},
		{"NonNumericContentLength", "", "Content-Length: 2a\r\n", json + smuggled, true},
		{"SignedContentLength", "", "Content-Length: +" + fmt.Sprint(len(json)) + "\r\n", json + smuggled, true},
		// HTTP/1.0 has no Transfer-Encoding: Go ignores it and frames the
		// body by Content-Length, a front end may not.
		{"HTTP10KeepAliveCLAndChunked", "HTTP/1.0", "Connection: keep-alive\r\nContent-Length: " + fmt.Sprint(len(json)) + "\r\nTransfer-Encoding: chunked\r\n", json + smuggled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.requests())
			h := head
			if tc.proto != "" {
				h = strings.Replace(h, "HTTP/1.1", tc.proto, 1)
			}
			resps, bodies, closed := rawExchange(t, addr, h+tc.headers+"\r\n"+tc.body)
			if len(resps) != 1 {
				t.Fatalf("%d responses, want exactly 1 (the smuggled request answered): %q", len(resps), bodies)
			}
			if !closed {
				t.Error("the connection stays open after the answer: a smuggled request could follow")
			}
			if !tc.refused && resps[0].Header.Get("Connection") != "close" && !resps[0].Close {
				t.Error("the answer does not say Connection: close")
			}
			got := resps[0].StatusCode
			sent := len(up.requests()) - before
			if tc.refused {
				if got < 400 || sent != 0 {
					t.Errorf("status %d, %d upstream requests: want a refusal before any engine", got, sent)
				}
			} else if got != http.StatusOK || sent != 1 {
				t.Errorf("status %d, %d upstream requests: want the first request served, once: %s", got, sent, bodies[0])
			}
		})
	}
}
