// Package gate is the sidecar's request path, without Caddy: the
// provisioned state (Gate), the dispatch of one request (Gate.Serve) in the
// order of docs/architecture.md ("Request order"), and each step's rules,
// one concept a file. What Caddy provides comes through small interfaces
// (Next, Deps.Placeholders, ProxyErrors), which caddymodule implements.
package gate
