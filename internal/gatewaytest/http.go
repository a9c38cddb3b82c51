package gatewaytest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// ErrorBody is OpenAI's error shape, as a client decodes it.
type ErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// Server is a test server: net/http/httptest's or internal/h1/h1test's.
type Server interface {
	Client() *http.Client
	BaseURL() string
}

// HTTPTest adapts an httptest.Server to Server.
type HTTPTest struct{ *httptest.Server }

func (s HTTPTest) BaseURL() string { return s.URL }

func server(srv any) Server {
	switch s := srv.(type) {
	case *httptest.Server:
		return HTTPTest{s}
	case Server:
		return s
	}
	panic("gatewaytest: not a test server")
}

// Post sends body as JSON to srv's path with client key key and extra
// headers hdr (name, value, name, value …).
func Post(t testing.TB, srv any, key, path, body string, hdr ...string) *http.Response {
	t.Helper()
	s := server(srv)
	req, err := http.NewRequest(http.MethodPost, s.BaseURL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Do sends method path to srv with an Authorization: Bearer tok header
// (none when tok is "") and returns the status and body.
func Do(t testing.TB, srv any, method, path, tok, body string) (int, string) {
	t.Helper()
	s := server(srv)
	req, err := http.NewRequest(method, s.BaseURL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// DecodeJSON reads resp's body into v and closes it, failing the test
// when it is not JSON.
func DecodeJSON(t testing.TB, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// BadClientKey returns a well-formed client key the store does not know,
// a different one for each i.
func BadClientKey(i int) string {
	return "llmf-" + strings.Repeat("0", 60) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + "00"
}

// AdminRequest is a GET /admin/keys from remoteAddr with bearer token tok.
func AdminRequest(remoteAddr, tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/admin/keys", nil)
	r.RemoteAddr = remoteAddr
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

// WaitFor polls cond until it holds, failing the test after 5 s.
func WaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
