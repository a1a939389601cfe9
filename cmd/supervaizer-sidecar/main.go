// Command supervaizer-sidecar is Caddy with the standard modules plus the
// Supervaizer v2 authorization gate (http.handlers.supervaizer_auth) and
// its `supervaizer` subcommand (keygen, mint, check).
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
	"github.com/supervaize/supervaizer-sidecar/caddymodule/cli"
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/logwriter"
)

// version and commit are set at build time (the Makefile's build target:
// -ldflags "-X main.version=… -X main.commit=…"); without them the module's
// build information gives what it has.
var version, commit string

const help = `supervaizer-sidecar: the authorization sidecar of Supervaizer v2 agents.

It is Caddy with the supervaizer_auth handler built in. It terminates every
route of an agent listening on 127.0.0.1, checks the transport key, the
JSON-RPC envelope and the Studio-signed workspace token as the Python SDK
does, and proxies only what it verified.

Usage:
  supervaizer-sidecar run --config <Caddyfile> --adapter caddyfile
  supervaizer-sidecar supervaizer check --config <Caddyfile>
  supervaizer-sidecar supervaizer keygen --out <dir>
  supervaizer-sidecar supervaizer mint --dev --key <private PEM> ...
  supervaizer-sidecar version
  supervaizer-sidecar <command> --help

Every other Caddy command (adapt, validate, fmt, list-modules, ...) works
as in Caddy. The repository's README.md and docs/ are the reference.
`

func main() {
	caddy.CustomBinaryName = cli.BinaryName
	caddy.CustomLongDescription = help
	switch args := os.Args[1:]; {
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version" || args[0] == "-v"):
		printVersion(os.Stdout)
		return
	case len(args) == 0 || len(args) == 1 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h"):
		fmt.Print(help)
		return
	}
	// A JSON config giving a handler key twice (which Caddy's decoding
	// would drop without a word) is refused before Caddy starts
	// (caddymodule/cli/runcheck.go).
	if err := cli.RunPrecheck(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cli.BinaryName, err)
		os.Exit(1)
	}
	caddycmd.Main()
}

// printVersion writes the sidecar's version and commit, then Caddy's.
func printVersion(w io.Writer) {
	v, c := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if c == "" {
		c = "unknown"
	}
	_, caddyVersion := caddy.Version()
	fmt.Fprintf(w, "supervaizer-sidecar %s (commit %s)\ncaddy %s\n", v, c, caddyVersion)
}
