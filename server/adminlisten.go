package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
)

// listenerHandlers composes what each listener serves: without an admin
// listener (a nil admin block or no listen), the client listener serves
// /admin/* with adm and the rest with data; with one, the client
// listener answers /admin/* with 404 and the admin listener serves adm
// alone. Admin writes from browsers on other origins are refused on
// either (crossOrigin).
func listenerHandlers(a *config.Admin, adm, data http.Handler, log *slog.Logger) (client, admin http.Handler, err error) {
	adm, err = crossOrigin(a, adm, log)
	if err != nil {
		return nil, nil, err
	}
	if a == nil || a.Listen == "" {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isAdminPath(r.URL.Path) {
				adm.ServeHTTP(w, r)
				return
			}
			data.ServeHTTP(w, r)
		}), nil, nil
	}
	client = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAdminPath(r.URL.Path) {
			// as unknown here as any other path the gateway does not serve
			gateway.WriteError(w, log, gateway.NotFound(r))
			return
		}
		data.ServeHTTP(w, r)
	})
	return client, adm, nil
}

// isAdminPath reports whether path is the admin API's.
func isAdminPath(path string) bool { return path == "/admin" || strings.HasPrefix(path, "/admin/") }

// crossOrigin refuses admin writes that a browser sends from a page of
// another origin (net/http's CrossOriginProtection: Sec-Fetch-Site, else
// Origin against Host), unless the origin is in a.AllowedOrigins; reads
// and requests without those headers (the CLI, scripts) pass. The refusal
// is a 403 in the OpenAI error shape.
func crossOrigin(a *config.Admin, next http.Handler, log *slog.Logger) (http.Handler, error) {
	c := http.NewCrossOriginProtection()
	if a != nil {
		for _, o := range a.AllowedOrigins {
			if err := c.AddTrustedOrigin(o); err != nil {
				return nil, fmt.Errorf("admin allowed_origins: %w", err)
			}
		}
	}
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Warn("cross-origin admin write refused", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"),
			"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		gateway.WriteError(w, log, llmflow.Errorf(llmflow.EFORBIDDEN,
			"cross-origin admin write refused: a browser page of another origin may not change llmflow (admin { allowed_origins } lists the ones that may)"))
	}))
	return c.Handler(next), nil
}
