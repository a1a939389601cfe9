// Command supervaizer-sidecar is Caddy with the standard modules plus the
// Supervaizer v2 authorization gate (http.handlers.supervaizer_auth) and
// its `supervaizer` subcommand (keygen, mint, check).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/cli"
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/logwriter"
)

func main() {
	caddycmd.Main()
}
