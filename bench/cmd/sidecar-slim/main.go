// Command sidecar-slim is a measurement variant of cmd/supervaizer-sidecar
// (bench only, not shipped): Caddy with only the modules the sidecar's
// Caddyfiles use (HTTP server, reverse_proxy, headers, TLS app for
// auto_https, logging, metrics, the Caddyfile adapter) instead of
// modules/standard. bench/README.md compares its memory with the real
// binary's (build: go build -o bin/sidecar-slim ./bench/cmd/sidecar-slim;
// measure: bin/sidecarbench -sidecar bin/sidecar-slim ...).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/caddytls"
	_ "github.com/caddyserver/caddy/v2/modules/logging"
	_ "github.com/caddyserver/caddy/v2/modules/metrics"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
)

func main() {
	caddycmd.Main()
}
