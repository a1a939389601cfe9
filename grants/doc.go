// Package grants verifies Studio-signed Supervaizer v2 workspace authorization
// tokens and decides whether their claims cover one call.
//
// A token is a compact EdDSA (Ed25519) JWT carrying a workspace agent grant:
// grant_id, workspace_id, agent_id, agent_slug, server_id and scopes
// (workspace-agent-grants seed, "Token Shape"). Verifier.Verify checks the
// signature (key from a PEM, or from a JWKS document this package fetches
// and refreshes, looked up through keyfunc) and the claims that depend only
// on configuration (shape, iss, aud, server_id, and exp, iat, nbf in whole
// seconds as the SDK), and caches verified claims by SHA-256 of the token.
// Authorize then runs the per-call checks (agent, workspace, scopes).
//
// Every failure is a *refusal.Refusal whose Code is the SDK's data.code, in the SDK's
// order of checks (docs/sdk-wire.md, "Workspace token checks" and
// "Workspace authorization messages"). The bootstrap set and the required-scope rule live here, as data.
//
// The package has no Caddy dependency; it never logs or returns a token.
package grants
