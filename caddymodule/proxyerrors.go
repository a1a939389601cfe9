// The proxy error adapter: what the gate needs to know of the errors
// reverse_proxy returns (gate.ProxyErrors).

package caddymodule

import (
	"errors"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

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
