// The http.handlers.supervaizer_auth middleware's request entry: the gate
// (gate.Gate.Serve, gate/serve.go) with Caddy's next handler.

package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// ServeHTTP runs the provisioned gate (gate.Gate.Serve) before next
// (normally reverse_proxy): caddyhttp.Handler is the gate's gate.Next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return h.g.Serve(w, r, next)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
