package gateway

import "net/http"

// closeAfterAmbiguousFraming makes the server close r's connection after
// its answer when r's body framing could be read differently by a proxy
// in front of the gateway, so that no request smuggled in r's body is
// ever parsed (RFC 9112 §6.1 and §11.2). It runs before the routes, on
// every request: two comparisons and, rarely, one header.
//
// What Go's HTTP/1 server (net/http, Go 1.26) does before any handler:
//
//   - Transfer-Encoding other than exactly one field "chunked" (such as
//     "chunked, identity", "identity", or two fields): 501 and the
//     connection closed (transfer.go parseTransferEncoding; server.go
//     isUnsupportedTEError).
//   - Several Content-Length fields with different values, or one that
//     is not a plain decimal number ("2a", "+5", ""): 400 and the
//     connection closed (transfer.go fixLength, parseContentLength).
//   - Content-Length together with Transfer-Encoding: chunked: accepted.
//     The body is read as chunked, the Content-Length field is deleted
//     (transfer.go fixLength: "if chunked { header.Del(\"Content-Length\")
//     … }") and the connection is kept alive, so whatever follows the
//     last chunk is parsed as the next request. A handler cannot tell
//     this request from a plain chunked one: both have
//     r.TransferEncoding = ["chunked"] and no Content-Length.
//   - HTTP/1.0 with Transfer-Encoding: the field is deleted and ignored
//     (issue 12785), the body framed by Content-Length, and the
//     connection kept alive if the client asked for keep-alive, although
//     RFC 9112 §6.1 says such framing is faulty.
//
// So every chunked request, and every HTTP/1.0 request, gets
// "Connection: close": the answer is written, then the server stops
// reading the connection. RFC 9112 §6.1 allows processing such a request
// by its Transfer-Encoding alone if the connection is closed after the
// answer; OpenAI clients send Content-Length, so only unusual clients
// pay one new connection per request.
func closeAfterAmbiguousFraming(w http.ResponseWriter, r *http.Request) {
	if len(r.TransferEncoding) > 0 || (r.ProtoMajor == 1 && r.ProtoMinor == 0) {
		w.Header()["Connection"] = []string{"close"}
	}
}
