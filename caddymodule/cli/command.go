// Package cli is the `supervaizer` subcommand of the sidecar binary:
// keygen (keygen.go: an Ed25519 signing key pair, its JWK and JWKS), mint
// (mint.go: a dev-only workspace token) and check (check.go: the
// supervaizer_auth handlers of a config, as start-up would see them, plus
// the checks start-up tolerates). Importing the package registers the
// command with Caddy's command line (cmd/supervaizer-sidecar does).
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(supervaizerCommand())
}

func supervaizerCommand() caddycmd.Command {
	return caddycmd.Command{
		Name:  "supervaizer",
		Usage: "keygen|mint|check [flags]",
		Short: "Supervaizer sidecar tools: signing keys, dev tokens, config check",
		Long: `
Tools for the supervaizer_auth handler.

  supervaizer-sidecar supervaizer keygen --out <dir> [--kid <kid>] [--force]
      Writes a new Ed25519 key pair for local testing: studio-signing.key
      (PKCS#8 private key, mode 0600), studio-signing.pub (PKIX public key),
      studio-signing.jwk.json (public JWK) and jwks.json ({"keys":[JWK]}).
      The kid defaults to the RFC 7638 thumbprint of the public key.

  supervaizer-sidecar supervaizer mint --dev --key <private PEM> --grant <id> --workspace <id>
      --agent-slug <slug> --agent-id <id> --server-id <id> --scope <scope>...
      [--ttl <dur>] [--iat <time>] [--exp <time>] [--nbf <time>]
      Prints a workspace authorization token signed with the key, marked
      "dev": true. Dev tokens are for local testing only: Studio mints the
      real ones. --ttl may be negative (--ttl -5m: already expired); a time
      is unix seconds, RFC 3339, or a duration from now (--iat +10m: not
      yet valid).

  supervaizer-sidecar supervaizer check --config <Caddyfile> [--adapter caddyfile]
      Adapts the config, provisions every supervaizer_auth handler as start-up
      does, fetches each JWKS once, and lists every problem, the warnings
      start-up logs (Caddy's admin endpoint, config autosave, ignored keys)
      and each handler's effective settings after environment resolution
      (secrets as fingerprints, URLs redacted). Exits 1 when there is a
      problem, prints OK otherwise.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(keygenCobra(), mintCobra(), checkCobra())
			// A misspelt subcommand is an error (exit 1), not the help with exit 0.
			cmd.Args = cobra.ArbitraryArgs
			cmd.RunE = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return c.Help()
				}
				c.SilenceErrors = true
				err := fmt.Errorf("unknown command %q: keygen, mint or check", args[0])
				fmt.Fprintf(c.ErrOrStderr(), "%s: supervaizer: %v\n", BinaryName, err)
				return err
			}
		},
	}
}

// wrap runs f with the command's output streams. An error is one plain
// line on stderr ("supervaizer-sidecar: …"), not a JSON log line; any
// error or non-zero status exits 1 (Caddy's Main exits 1 on an error it
// does not know).
func wrap(f func(fs caddycmd.Flags, stdout, stderr io.Writer) (int, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		status, err := f(caddycmd.Flags{FlagSet: cmd.Flags()}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", BinaryName, oneLine(err.Error()))
		}
		switch {
		case err != nil:
			cmd.SilenceErrors = true
			return err
		case status != 0:
			cmd.SilenceErrors = true
			return errExit
		}
		return nil
	}
}

// BinaryName is the command's name in help, usage and error lines.
const BinaryName = "supervaizer-sidecar"

// errExit makes Caddy's Main exit 1 for a non-zero status without an error.
var errExit = errors.New("exit status 1")

// oneLine folds an error's text onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
