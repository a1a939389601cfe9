// The http.handlers.supervaizer_auth middleware's request entry, and every
// adapter the gate uses during a request: the gate (gate.Gate.Serve,
// gate/serve.go) with Caddy's next handler, the decision's facts on the
// request's caddy.Replacer, reverse_proxy's errors read for the gate.

package caddymodule

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
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

// The placeholder adapter: the gate's decision facts (gate/audit.go)
// answered through the request's caddy.Replacer.

// exposePlaceholders is the gate's Placeholders hook: it maps lookup on r's
// caddy.Replacer. Without a replacer in the context (a handler called
// outside Caddy's server, as in benchmarks) it does nothing.
func exposePlaceholders(r *http.Request, lookup func(key string) (any, bool)) {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok && repl != nil {
		repl.Map(lookup)
	}
}

// The proxy error adapter: what the gate needs to know of the errors
// reverse_proxy returns (gate.ProxyErrors).

// proxyErrors reads reverse_proxy's errors for the gate.
type proxyErrors struct{}

// DialFailed reports whether err is reverse_proxy's DialError (the agent
// could not be reached).
func (proxyErrors) DialFailed(err error) bool {
	var de reverseproxy.DialError
	return errors.As(err, &de)
}

// Status is the status of a caddyhttp.HandlerError (504 for a timeout), or 0.
func (proxyErrors) Status(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	return 0
}
