// Package h1test starts an h1.Server on a loopback port for tests, as
// net/http/httptest starts net/http's.
package h1test

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/go-llmflow/llmflow/internal/h1"
)

// Server is an h1.Server listening on 127.0.0.1.
type Server struct {
	URL      string
	Listener net.Listener
	Config   *h1.Server
	client   *http.Client
	done     chan struct{}
}

// NewServer starts serving h.
func NewServer(h http.Handler) *Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("h1test: listen: " + err.Error())
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Listener: ln, Config: &h1.Server{Handler: h}, done: make(chan struct{})}
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	go func() {
		defer close(s.done)
		s.Config.Serve(ln)
	}()
	return s
}

// BaseURL is URL (for gatewaytest.Server).
func (s *Server) BaseURL() string { return s.URL }

// Client is an http.Client for the server.
func (s *Server) Client() *http.Client { return s.client }

// CloseClientConnections cuts every open connection.
func (s *Server) CloseClientConnections() { s.Config.CloseConnections() }

// Close stops the server, waiting up to 5 s for requests to finish before
// cutting them.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.Config.Shutdown(ctx) != nil {
		s.Config.Close()
	}
	<-s.done
	s.client.CloseIdleConnections()
}
