package server

import (
	"log/slog"
	"net/http"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
)

// listenerHandlers composes what each listener serves: without an admin
// listener (a nil admin block or no listen), the client listener serves
// /admin/* with adm and the rest with data; with one, the client
// listener answers /admin/* with 404 and the admin listener serves adm
// alone.
func listenerHandlers(a *config.Admin, adm *admin.Handler, data http.Handler, log *slog.Logger) (client, admins http.Handler) {
	if a == nil || a.Listen == "" {
		return adm.With(data), nil
	}
	client = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if admin.IsPath(r.URL.Path) {
			// as unknown here as any other path the gateway does not serve
			gateway.WriteError(w, log, gateway.NotFound(r))
			return
		}
		data.ServeHTTP(w, r)
	})
	return client, adm
}
