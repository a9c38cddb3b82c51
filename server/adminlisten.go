package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/console"
	"github.com/go-llmflow/llmflow/gateway"
)

// listenerHandlers composes what each listener serves: without an admin
// listener (a nil admin block or no listen), the client listener serves
// /admin/* with adm, the console (/console/…) with con and the rest with
// data; with one, the client listener answers /admin/* and /console/…
// with 404 and the admin listener serves adm and con alone.
func listenerHandlers(a *config.Admin, adm *admin.Handler, con *console.Console, data http.Handler, log *slog.Logger) (client, admins http.Handler) {
	withConsole := func(rest http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if console.IsPath(r.URL.Path) {
				con.ServeHTTP(w, r)
				return
			}
			rest.ServeHTTP(w, r)
		})
	}
	if a == nil || a.Listen == "" {
		return withConsole(adm.With(data)), nil
	}
	client = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if admin.IsPath(r.URL.Path) || console.IsPath(r.URL.Path) {
			// as unknown here as any other path the gateway does not serve
			gateway.WriteError(w, log, gateway.NotFound(r))
			return
		}
		data.ServeHTTP(w, r)
	})
	return client, withConsole(adm)
}

// newConsole builds the console of cfg over the admin handler that adm
// will name (the two refer to each other: the console asks the admin API
// who signs in, the admin API asks the console for sessions).
func newConsole(cfg *config.Config, adm *lateAdmin, store *console.Store, log *slog.Logger) (*console.Console, error) {
	o := console.Options{Auth: adm, OIDC: cfg.OIDC, AllowedOrigins: allowedOrigins(cfg), Store: store, Log: log}
	if cfg.OIDC != nil && cfg.OIDC.ClientSecretFile != "" {
		s, err := config.ReadSecret(cfg.OIDC.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("oidc client_secret_file: %w", err)
		}
		o.ClientSecret = s
	}
	return console.New(o)
}

// newSessionStore is the console's session store of the process: its
// sessions last the oidc block's session_ttl at the start (a reload keeps
// the store, and the lifetime).
func newSessionStore(cfg *config.Config) *console.Store {
	if cfg.OIDC != nil {
		return console.NewStore(cfg.OIDC.SessionTTL, nil)
	}
	return console.NewStore(0, nil)
}

// lateAdmin is console.Auth over an admin handler set once it exists.
type lateAdmin struct{ h *admin.Handler }

func (l *lateAdmin) UserExists(ctx context.Context, name string) error {
	return l.h.UserExists(ctx, name)
}

func (l *lateAdmin) CheckToken(r *http.Request, token string) (string, error) {
	return l.h.CheckToken(r, token)
}

// selfService is cfg's self_service block for the admin API.
func selfService(cfg *config.Config) admin.SelfService {
	if cfg.SelfService == nil {
		return admin.SelfService{}
	}
	return admin.SelfService{Keys: cfg.SelfService.Keys, MaxKeys: cfg.SelfService.MaxKeys}
}
