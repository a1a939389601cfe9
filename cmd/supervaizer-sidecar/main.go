// Command supervaizer-sidecar is Caddy with the standard modules plus the
// Supervaizer v2 authorization gate (http.handlers.supervaizer_auth).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
)

func main() {
	caddycmd.Main()
}
