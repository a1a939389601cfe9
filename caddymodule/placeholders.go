// The placeholder adapter: the gate's decision facts (gate/audit.go)
// answered through the request's caddy.Replacer.

package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
)

// exposePlaceholders is the gate's Placeholders hook: it maps lookup on r's
// caddy.Replacer. Without a replacer in the context (a handler called
// outside Caddy's server, as in benchmarks) it does nothing.
func exposePlaceholders(r *http.Request, lookup func(key string) (any, bool)) {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok && repl != nil {
		repl.Map(lookup)
	}
}
