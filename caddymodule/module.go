// Package caddymodule is the Caddy glue of the Supervaizer v2 authorization
// sidecar: the http.handlers.supervaizer_auth handler, its Caddyfile
// directive and its configuration. The request path is gate/ (Caddy-free:
// gate.Gate.Serve, in the order of docs/architecture.md, "Request order");
// this package resolves the configuration, builds the gate.Gate, shares
// state across reloads through Caddy's usage pools, and adapts what Caddy
// provides (next handler, placeholders, proxy errors) to the gate.
package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	// The buffered log writer (caddy.logging.writers.buffered) the shipped
	// configurations use, registered wherever the handler is.
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/logwriter"
	"github.com/supervaize/supervaizer-sidecar/gate"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("supervaizer_auth", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("supervaizer_auth", httpcaddyfile.Before, "reverse_proxy")
}

// Handler is the http.handlers.supervaizer_auth middleware. Its JSON fields
// are the module's JSON configuration; every unset field falls back to the
// Supervaizer SDK's environment variable of the same meaning (see docs/directives.md,
// "Directive reference"). Every string field, its blocks' included, takes
// the placeholders known at start-up ({env.NAME}, {file.PATH}, {system.*}),
// expanded once before any check (placeholdersettings.go).
// The range of every numeric field, and the rules between fields, are
// gate.Config.Validate's (gate/config.go, gate/bounds.go), which Validate applies to
// a Caddyfile and a JSON config alike.
type Handler struct {
	// ServerID is this server's Studio id (default $SUPERVAIZER_SERVER_ID);
	// required unless in local mode; no whitespace or control character.
	ServerID string `json:"server_id,omitempty"`
	// APIKeys are the accepted X-API-Key values (default
	// $SUPERVAIZER_API_KEY with write scope). At least one is required.
	APIKeys []APIKey `json:"api_keys,omitempty"`
	// Agents maps each served agent slug to its Studio agent id ("" when not
	// registered yet). A slug is one path segment of its routes
	// (registration.CheckSlug, the one slug rule).
	Agents map[string]string `json:"agents,omitempty"`
	// WorkspaceAuth configures token verification.
	WorkspaceAuth *WorkspaceAuth `json:"workspace_auth,omitempty"`
	// LocalMode lets /a2a run without tokens when no workspace_auth setting
	// is present (default $SUPERVAIZER_LOCAL_MODE).
	LocalMode *bool `json:"local_mode,omitempty"`
	// MaxBody bounds request bodies, in bytes, on every route class without
	// a bound of its own below (default: each class's default; unset, those
	// are MaxBodyA2A's and MaxBodyData's defaults and 1 MiB for every other
	// route). A body whose declared length (Content-Length) is larger is
	// refused before the agent is called: 413 {"detail": "Request body too
	// large"}, or on /a2a the JSON-RPC error of MaxBodyA2A (/a2a reads its
	// body whole, so there nothing is ever forwarded). A streamed body of
	// undeclared length is cut at the bound: the bytes up to it may already
	// have reached the agent.
	MaxBody int64 `json:"max_body,omitempty"`
	// MaxBodyA2A bounds a POST /a2a body, in bytes (default MaxBody when it
	// is set, else 16 MiB: an action carrying an inline file field, base64
	// in the action JSON, is 4/3 of the file plus the request; 16 MiB holds
	// a file of about 11 MiB). The gate reads the whole body into memory
	// before deciding, once the write key was checked. A larger body is
	// answered HTTP 200 {"jsonrpc":"2.0","id":null,"error":{"code":-32600,
	// "message":"Request body too large","data":{"code":
	// "request_body_too_large","max_body":<bytes>}}} (the SDK has no bound,
	// so this JSON-RPC error is the sidecar's own).
	MaxBodyA2A int64 `json:"max_body_a2a,omitempty"`
	// MaxBodyData bounds a DataResource body (create, update, import), in
	// bytes (default MaxBody when it is set, else 16 MiB, for bulk imports).
	// The body is streamed to the agent, not held: a declared length over
	// the bound is 413 before the agent is called; an undeclared one is cut
	// at the bound (the proxied request fails).
	MaxBodyData int64 `json:"max_body_data,omitempty"`
	// BodyMemory is the process-wide budget, in bytes, of the /a2a bodies
	// held in memory at once (default 32 MiB, sized for the k8s base's
	// 256 MiB container: docs/errors.md, "Body limits"; at least max_body_a2a, the
	// default budget included, at most 64 GiB). All handlers of the process share one budget; when they
	// disagree the largest value of the loaded handlers holds. A call whose
	// body does not fit is answered at once, retryably: HTTP 503 with
	// Retry-After and the JSON-RPC error data.code "server_busy"; the agent
	// receives nothing.
	BodyMemory int64 `json:"body_memory,omitempty"`
	// BodyTimeout bounds the time to receive a request body, on every route
	// class that has one (default 10 s, at least 1 s, at most 10 min): /a2a
	// answers 408; a streamed body (DataResource, public, events, legacy,
	// other) is cut and the proxied request fails.
	BodyTimeout caddy.Duration `json:"body_timeout,omitempty"`
	// ForwardToken keeps X-Supervaize-Workspace-Authorization on forwarded
	// requests (default true).
	ForwardToken *bool `json:"forward_token,omitempty"`
	// VerifiedHeaders adds the X-Supervaize-Verified-* headers to allowed
	// requests (default true). Off: none is added (incoming ones are still
	// removed), for agents that do not read them.
	VerifiedHeaders *bool `json:"verified_headers,omitempty"`
	// VerifiedHeadersForm is how the verified context travels when
	// VerifiedHeaders is on: "headers" (default: the ten
	// X-Supervaize-Verified-* headers) or "compact" (one header,
	// X-Supervaize-Verified-Context, a JSON object of the same facts:
	// docs/verified-context.md). Caddyfile: verified_headers compact.
	VerifiedHeadersForm string `json:"verified_headers_form,omitempty"`
	// LegacyRoutes is "allow" (default: API key required) or "deny" (404)
	// for /api/supervaizer/... v1 routes.
	LegacyRoutes string `json:"legacy_routes,omitempty"`
	// OtherRoutes is "deny" (default, 404), "api_key" or "public" for every
	// path outside the known route classes.
	OtherRoutes string `json:"other_routes,omitempty"`
	// EventsRequireWorkspaceToken refuses /a2a/events without a workspace
	// token (403) instead of streaming unfiltered.
	EventsRequireWorkspaceToken bool `json:"events_require_workspace_token,omitempty"`
	// EventsFanout serves every /a2a/events client (HTTP/1.x) from one
	// upstream stream read from Upstream, instead of one proxied stream per
	// client (default off; needs upstream). See docs/routes.md.
	EventsFanout bool `json:"events_fanout,omitempty"`
	// AuditLog is "all" (default: one line per decision, allow at info, deny
	// at warn) or "deny" (denials only; allows are still counted in metrics).
	AuditLog string `json:"audit_log,omitempty"`
	// Upstream is the agent's base URL (e.g. http://127.0.0.1:8000), where
	// its Agent Cards are read.
	Upstream string `json:"upstream,omitempty"`
	// Registration chooses the source of the agent's v2 contract.
	Registration *RegistrationConfig `json:"registration,omitempty"`
	// Idempotency configures retry safety of confirm actions.
	Idempotency *IdempotencyConfig `json:"idempotency,omitempty"`
	// Limits are per-workspace rate and concurrency rules (limits.go;
	// default none).
	Limits *LimitsConfig `json:"limits,omitempty"`

	g         *gate.Gate     // the provisioned request path (Provision)
	effective []gate.Setting // the effective settings of the last build (gate/settings.go)

	placeholdersExpanded bool // the settings' placeholders were expanded (placeholdersettings.go)
}

// APIKey is one accepted transport key and its scope ("read" or "write";
// write implies read).
type APIKey struct {
	// Key is the X-API-Key value (compared by its SHA-256, logged as a
	// fingerprint).
	Key string `json:"key"`
	// Scope is "write" (default) or "read": a read key is accepted where
	// the route needs only read (GET and HEAD, event streams); write implies
	// read.
	Scope string `json:"scope,omitempty"`
}

// WorkspaceAuth configures workspace token verification
// (workspace-agent-grants seed, "Stateless Agent Requirement"). Each unset
// field falls back to SUPERVAIZER_WORKSPACE_AUTH_<NAME>.
type WorkspaceAuth struct {
	// Required turns token verification on for non-bootstrap /a2a calls
	// (default $SUPERVAIZER_WORKSPACE_AUTH_REQUIRED, else off: outside local
	// mode they then fail workspace_authorization_not_configured).
	Required *bool `json:"required,omitempty"`
	// Issuer is the expected iss claim, Studio's URL (default
	// $SUPERVAIZER_WORKSPACE_AUTH_ISSUER); required when Required.
	Issuer string `json:"issuer,omitempty"`
	// Audience is the expected aud claim (default
	// $SUPERVAIZER_WORKSPACE_AUTH_AUDIENCE, else
	// supervaizer-server:<server_id>).
	Audience string `json:"audience,omitempty"`
	// PublicKey is Studio's Ed25519 public key, a PEM file path or inline
	// PEM (default $SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY). Exactly one of
	// PublicKey and JWKSURL when Required.
	PublicKey string `json:"public_key,omitempty"`
	// JWKSURL is the URL of Studio's JWKS (default
	// $SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL), refreshed in the background.
	JWKSURL string `json:"jwks_url,omitempty"`
	// Leeway is the clock skew tolerance for exp, iat and nbf. Absent: the
	// default $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS, else 30 s; 0 (JSON
	// "leeway": 0) means none. A whole number of seconds, like the SDK's: a
	// fraction or a negative value is refused at start-up.
	Leeway *caddy.Duration `json:"leeway,omitempty"`
	// JWKSRefresh is the background JWKS refresh period (default 5 min).
	JWKSRefresh caddy.Duration `json:"jwks_refresh,omitempty"`
	// JWKSUnknownKIDInterval is the minimum time between refreshes caused by
	// an unknown kid (default 30 s).
	JWKSUnknownKIDInterval caddy.Duration `json:"jwks_unknown_kid_interval,omitempty"`
	// JWKSTimeout bounds one JWKS fetch (default 5 s); a request that
	// triggers an unknown-kid refresh waits at most this long.
	JWKSTimeout caddy.Duration `json:"jwks_timeout,omitempty"`
	// JWKSMaxStale, if set, is how long the last good JWKS keys keep
	// verifying without a newer good fetch (it must exceed JWKSRefresh).
	// Past it, tokens fail workspace_authorization_jwks_unavailable and
	// /_sidecar/ready is false (waiting_for "jwks_stale") until a fetch
	// succeeds. Default off: the keys are kept indefinitely, as the SDK does.
	JWKSMaxStale caddy.Duration `json:"jwks_max_stale,omitempty"`
	// MaxTokenLifetime, if set, refuses a token whose exp - iat exceeds it,
	// or that has no iat, with workspace_authorization_invalid_claims.
	// Default off (the SDK has no bound).
	MaxTokenLifetime caddy.Duration `json:"max_token_lifetime,omitempty"`
	// CacheSize bounds the verified-token cache (entries, default 10,000).
	CacheSize int `json:"cache_size,omitempty"`
	// Introspection asks Studio (RFC 7662) whether a verified token is
	// still active before covered calls (default off; introspection.go).
	Introspection *IntrospectionConfig `json:"introspection,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.supervaizer_auth",
		New: func() caddy.Module { return new(Handler) },
	}
}
