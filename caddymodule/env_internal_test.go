package caddymodule

import (
	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/gate"
	"os"
	"strings"
	"testing"
)

// clearSupervaizerEnv unsets every SUPERVAIZER_* variable for the test:
// build reads them when a setting is not in the config.
func clearSupervaizerEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SUPERVAIZER_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}

// The environment variables the tests set, by their settings' names in
// the table (config/config.go).
var (
	envAPIKey       = config.Env("api_key")
	envServerID     = config.Env("server_id")
	envLocalMode    = config.Env("local_mode")
	envAuthRequired = config.Env("workspace_auth required")
	envAuthIssuer   = config.Env("workspace_auth issuer")
	envAuthAudience = config.Env("workspace_auth audience")
	envAuthPEM      = config.Env("workspace_auth public_key")
	envAuthJWKS     = config.Env("workspace_auth jwks_url")
	envAuthLeeway   = config.Env("workspace_auth leeway")
)

// fingerprint is the log-safe form of a secret (gate.Fingerprint).
func fingerprint(secret string) string { return gate.Fingerprint(secret) }
