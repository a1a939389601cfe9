// Command supervaizer-sidecar is Caddy with the standard modules plus the
// Supervaizer v2 authorization gate (http.handlers.supervaizer_auth) and
// its `supervaizer` subcommand (keygen, mint, check).
package main

import (
	"fmt"
	"os"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
	"github.com/supervaize/supervaizer-sidecar/caddymodule/cli"
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/logwriter"
)

func main() {
	// A JSON config giving a handler key twice (which Caddy's decoding
	// would drop without a word) is refused before Caddy starts
	// (caddymodule/cli/runcheck.go).
	if err := cli.RunPrecheck(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	caddycmd.Main()
}
