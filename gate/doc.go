// Package gate is the Caddy-free request-path policy of the sidecar, moved
// out of caddymodule step by step (issue 22): so far the transport key
// check (apikey.go). caddymodule imports it as pathgate (its own
// provisioned state is still the type caddymodule.gate).
package gate
