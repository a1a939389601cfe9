package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// serveEvents gates GET /a2a/events (the read key was checked by the caller).
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, a *audit) error {
	a.allow("api_key")
	return next.ServeHTTP(w, r)
}
