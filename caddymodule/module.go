// Package caddymodule is the Caddy glue of the Supervaizer v2 authorization
// sidecar: the http.handlers.supervaizer_auth handler, its Caddyfile
// directive and its configuration. The request path is gate/ (Caddy-free:
// gate.Gate.Serve, in the order of docs/architecture.md, "Request order");
// this package resolves the configuration, builds the gate.Gate, shares
// state across reloads through Caddy's usage pools, and adapts what Caddy
// provides (next handler, placeholders, proxy errors) to the gate.
package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	// The buffered log writer (caddy.logging.writers.buffered) the shipped
	// configurations use, registered wherever the handler is.
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/logwriter"
	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/gate"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("supervaizer_auth", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("supervaizer_auth", httpcaddyfile.Before, "reverse_proxy")
}

// Handler is the http.handlers.supervaizer_auth middleware. Its JSON is
// config.Config's (config/config.go: every setting, its bounds and its
// Caddyfile line, declared once), embedded; the rest is what Provision
// builds.
type Handler struct {
	config.Config

	g         *gate.Gate       // the provisioned request path (Provision)
	effective []config.Setting // the effective settings of the last build (config/settings.go)

	placeholdersExpanded bool // the settings' placeholders were expanded (placeholdersettings.go)
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.supervaizer_auth",
		New: func() caddy.Module { return new(Handler) },
	}
}
