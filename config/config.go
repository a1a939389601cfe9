// Package config is the configuration of the supervaizer_auth handler,
// declared once: the Config struct is the handler's JSON (caddymodule's
// Handler embeds it), and each field carries its JSON name, its Caddyfile
// line, its doc comment and, in its `cfg` tag, its bounds, whether 0 is a
// value of its own, whether it is a secret and its environment fallback
// (table.go reads the tags into the one table of settings). From that
// table come the one validator of both front doors (Validate, bounds.go),
// the Caddyfile reader (caddymodule/caddyfile.go), the placeholder
// expansion (caddymodule/placeholdersettings.go) and the directive
// reference's test (docs/directives.md). The package has no Caddy import;
// the request path (gate/) reads a Config, never the reverse.
//
// The `cfg` tag's options, comma-separated:
//
//	line=NAME   the Caddyfile line, when it is not the JSON name ("-": none of its own)
//	min=V,max=V the bounds of a duration, size (int64, bytes) or count (int)
//	zero        0 is a value of its own (written 0 is taken, not refused)
//	secret      a placeholder error never shows its text
//	env=NAME    the environment variable read when the setting is absent
//	repeat      the Caddyfile line may repeat, each adding to the others
//	self        in a list of blocks, the field is the element itself (api_key 1)
//	custom      the Caddyfile line has its own reader (caddymodule/caddyfile.go)
package config

// Config is the supervaizer_auth handler's configuration. Every unset
// field falls back to the Supervaizer SDK's environment variable of the
// same meaning where its tag names one (docs/directives.md, "Directive
// reference"). Every string field, its blocks' included, takes the
// placeholders known at start-up ({env.NAME}, {file.PATH}, {system.*}),
// expanded once before any check (caddymodule/placeholdersettings.go). The
// range of every numeric field, and the rules between fields, are
// Validate's, for a Caddyfile and a JSON config alike.
type Config struct {
	// ServerID is this server's Studio id (default $SUPERVAIZER_SERVER_ID);
	// required unless in local mode; no whitespace or control character.
	ServerID string `json:"server_id,omitempty" cfg:"env=SUPERVAIZER_SERVER_ID"`
	// APIKeys are the accepted X-API-Key values (default
	// $SUPERVAIZER_API_KEY with write scope). At least one is required.
	APIKeys []APIKey `json:"api_keys,omitempty" cfg:"line=api_key,repeat,custom,env=SUPERVAIZER_API_KEY"`
	// Agents maps each served agent slug to its Studio agent id ("" when not
	// registered yet). A slug is one path segment of its routes
	// (registration.CheckSlug, the one slug rule).
	Agents map[string]string `json:"agents,omitempty" cfg:"line=agent,repeat,custom"`
	// WorkspaceAuth configures token verification.
	WorkspaceAuth *WorkspaceAuth `json:"workspace_auth,omitempty"`
	// LocalMode lets /a2a run without tokens when no workspace_auth setting
	// is present (default $SUPERVAIZER_LOCAL_MODE).
	LocalMode *bool `json:"local_mode,omitempty" cfg:"env=SUPERVAIZER_LOCAL_MODE"`
	// MaxBody bounds request bodies, in bytes, on every route class without
	// a bound of its own below (default: each class's default; unset, those
	// are MaxBodyA2A's and MaxBodyData's defaults and 1 MiB for every other
	// route). A body whose declared length (Content-Length) is larger is
	// refused before the agent is called: 413 {"detail": "Request body too
	// large"}, or on /a2a the JSON-RPC error of MaxBodyA2A (/a2a reads its
	// body whole, so there nothing is ever forwarded). A streamed body of
	// undeclared length is cut at the bound: the bytes up to it may already
	// have reached the agent.
	MaxBody int64 `json:"max_body,omitempty" cfg:"max=1GiB"`
	// MaxBodyA2A bounds a POST /a2a body, in bytes (default MaxBody when it
	// is set, else 16 MiB: an action carrying an inline file field, base64
	// in the action JSON, is 4/3 of the file plus the request; 16 MiB holds
	// a file of about 11 MiB). The gate reads the whole body into memory
	// before deciding, once the write key was checked. A larger body is
	// answered HTTP 200 {"jsonrpc":"2.0","id":null,"error":{"code":-32600,
	// "message":"Request body too large","data":{"code":
	// "request_body_too_large","max_body":<bytes>}}} (the SDK has no bound,
	// so this JSON-RPC error is the sidecar's own).
	MaxBodyA2A int64 `json:"max_body_a2a,omitempty" cfg:"max=1GiB"`
	// MaxBodyData bounds a DataResource body (create, update, import), in
	// bytes (default MaxBody when it is set, else 16 MiB, for bulk imports).
	// The body is streamed to the agent, not held: a declared length over
	// the bound is 413 before the agent is called; an undeclared one is cut
	// at the bound (the proxied request fails).
	MaxBodyData int64 `json:"max_body_data,omitempty" cfg:"max=1GiB"`
	// BodyMemory is the process-wide budget, in bytes, of the /a2a bodies
	// held in memory at once (default 32 MiB, sized for the k8s base's
	// 256 MiB container: docs/errors.md, "Body limits"; at least
	// max_body_a2a, the default budget included, at most 64 GiB). All
	// handlers of the process share one budget; when they disagree the
	// largest value of the loaded handlers holds. A call whose body does
	// not fit is answered at once, retryably: HTTP 503 with Retry-After and
	// the JSON-RPC error data.code "server_busy"; the agent receives
	// nothing.
	BodyMemory int64 `json:"body_memory,omitempty" cfg:"max=64GiB"`
	// BodyTimeout bounds the time to receive a request body, on every route
	// class that has one (default 10 s, at least 1 s, at most 10 min): /a2a
	// answers 408; a streamed body (DataResource, public, events, legacy,
	// other) is cut and the proxied request fails.
	BodyTimeout Duration `json:"body_timeout,omitempty" cfg:"min=1s,max=10m"`
	// ForwardToken keeps X-Supervaize-Workspace-Authorization on forwarded
	// requests (default true).
	ForwardToken *bool `json:"forward_token,omitempty"`
	// VerifiedHeaders adds the X-Supervaize-Verified-* headers to allowed
	// requests (default true). Off: none is added (incoming ones are still
	// removed), for agents that do not read them. Caddyfile:
	// verified_headers on|off|compact.
	VerifiedHeaders *bool `json:"verified_headers,omitempty" cfg:"custom"`
	// VerifiedHeadersForm is how the verified context travels when
	// VerifiedHeaders is on: "headers" (default: the ten
	// X-Supervaize-Verified-* headers) or "compact" (one header,
	// X-Supervaize-Verified-Context, a JSON object of the same facts:
	// docs/verified-context.md). Caddyfile: verified_headers compact.
	VerifiedHeadersForm string `json:"verified_headers_form,omitempty" cfg:"line=-"`
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
	Registration *RegistrationConfig `json:"registration,omitempty" cfg:"custom"`
	// Idempotency configures retry safety of confirm actions.
	Idempotency *IdempotencyConfig `json:"idempotency,omitempty" cfg:"custom"`
	// Limits are per-workspace rate and concurrency rules (default none;
	// docs/limits.md).
	Limits *LimitsConfig `json:"limits,omitempty"`
	// References binds object references to the workspace that first used
	// them (docs/workspaces.md; default none: off).
	References *ReferencesConfig `json:"references,omitempty" cfg:"custom"`
}

// APIKey is one accepted transport key and its scope ("read" or "write";
// write implies read).
type APIKey struct {
	// Key is the X-API-Key value (compared by its SHA-256, logged as a
	// fingerprint).
	Key string `json:"key" cfg:"self,secret"`
	// Scope is "write" (default) or "read": a read key is accepted where
	// the route needs only read (GET and HEAD, event streams); write implies
	// read.
	Scope string `json:"scope,omitempty"`
}

// WorkspaceAuth configures workspace token verification
// (workspace-agent-grants seed, "Stateless Agent Requirement"). Each unset
// field with an env option falls back to that variable.
type WorkspaceAuth struct {
	// Required turns token verification on for non-bootstrap /a2a calls
	// (default $SUPERVAIZER_WORKSPACE_AUTH_REQUIRED, else off: outside local
	// mode they then fail workspace_authorization_not_configured).
	Required *bool `json:"required,omitempty" cfg:"env=SUPERVAIZER_WORKSPACE_AUTH_REQUIRED"`
	// Issuer is the expected iss claim, Studio's URL (default
	// $SUPERVAIZER_WORKSPACE_AUTH_ISSUER); required when Required.
	Issuer string `json:"issuer,omitempty" cfg:"env=SUPERVAIZER_WORKSPACE_AUTH_ISSUER"`
	// Audience is the expected aud claim (default
	// $SUPERVAIZER_WORKSPACE_AUTH_AUDIENCE, else
	// supervaizer-server:<server_id>).
	Audience string `json:"audience,omitempty" cfg:"env=SUPERVAIZER_WORKSPACE_AUTH_AUDIENCE"`
	// PublicKey is Studio's Ed25519 public key, a PEM file path or inline
	// PEM (default $SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY). Exactly one of
	// PublicKey and JWKSURL when Required.
	PublicKey string `json:"public_key,omitempty" cfg:"env=SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY"`
	// JWKSURL is the URL of Studio's JWKS (default
	// $SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL), refreshed in the background.
	JWKSURL string `json:"jwks_url,omitempty" cfg:"env=SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL"`
	// Leeway is the clock skew tolerance for exp, iat and nbf. Absent: the
	// default $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS, else 30 s; 0 (JSON
	// "leeway": 0) means none. A whole number of seconds, like the SDK's: a
	// fraction or a negative value is refused at start-up. The Caddyfile
	// also takes plain seconds (leeway 30).
	Leeway *Duration `json:"leeway,omitempty" cfg:"max=5m,zero,custom,env=SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS"`
	// JWKSRefresh is the background JWKS refresh period (default 5 min).
	JWKSRefresh Duration `json:"jwks_refresh,omitempty" cfg:"min=1s,max=24h"`
	// JWKSUnknownKIDInterval is the minimum time between refreshes caused by
	// an unknown kid (default 30 s).
	JWKSUnknownKIDInterval Duration `json:"jwks_unknown_kid_interval,omitempty" cfg:"min=10ms,max=1h"`
	// JWKSTimeout bounds one JWKS fetch (default 5 s); a request that
	// triggers an unknown-kid refresh waits at most this long.
	JWKSTimeout Duration `json:"jwks_timeout,omitempty" cfg:"max=1m"`
	// JWKSMaxStale, if set, is how long the last good JWKS keys keep
	// verifying without a newer good fetch (it must exceed JWKSRefresh).
	// Past it, tokens fail workspace_authorization_jwks_unavailable and
	// /_sidecar/ready is false (waiting_for "jwks_stale") until a fetch
	// succeeds. Default off: the keys are kept indefinitely, as the SDK does.
	JWKSMaxStale Duration `json:"jwks_max_stale,omitempty" cfg:"max=720h"`
	// MaxTokenLifetime, if set, refuses a token whose exp - iat exceeds it,
	// or that has no iat, with workspace_authorization_invalid_claims.
	// Default off (the SDK has no bound).
	MaxTokenLifetime Duration `json:"max_token_lifetime,omitempty" cfg:"max=720h"`
	// CacheSize bounds the verified-token cache (entries, default 10,000).
	CacheSize int `json:"cache_size,omitempty" cfg:"max=10000000"`
	// Introspection asks Studio (RFC 7662) whether a verified token is
	// still active before covered calls (default off).
	Introspection *IntrospectionConfig `json:"introspection,omitempty"`
}

// IntrospectionConfig is workspace_auth's introspection block (RFC 7662);
// absent: off.
type IntrospectionConfig struct {
	// URL is the introspection endpoint (required).
	URL string `json:"url,omitempty"`
	// ClientID authenticates the sidecar with HTTP Basic, with ClientSecret.
	ClientID string `json:"client_id,omitempty" cfg:"secret"`
	// ClientSecret is the HTTP Basic password of ClientID.
	ClientSecret string `json:"client_secret,omitempty" cfg:"secret"`
	// Bearer authenticates with Authorization: Bearer instead.
	Bearer string `json:"bearer,omitempty" cfg:"secret"`
	// Timeout bounds one call (default 2 s).
	Timeout Duration `json:"timeout,omitempty" cfg:"max=1m"`
	// CacheTTL keeps an active answer (default 10 s, never past the token's exp).
	CacheTTL Duration `json:"cache_ttl,omitempty" cfg:"max=1h"`
	// NegativeCacheTTL keeps an inactive answer (default 2 s).
	NegativeCacheTTL Duration `json:"negative_cache_ttl,omitempty" cfg:"max=1h"`
	// CacheSize bounds the answer cache (entries, default 10,000).
	CacheSize int `json:"cache_size,omitempty" cfg:"max=10000000"`
	// Actions are the covered targets (action names, surface ids or
	// resource scopes); "*" stands for exactly one dot-separated segment.
	// Default: introspection.DefaultActions (introspection/targets.go).
	Actions []string `json:"actions,omitempty" cfg:"repeat"`
}

// RegistrationConfig chooses where the agent's v2 contract comes from
// (supervaizer-v2 seed, "Registration"; protocol-support seed, "Agent Card
// extension"). Caddyfile: registration from_upstream|off|file <path> { }.
type RegistrationConfig struct {
	// Source is "from_upstream" (default when upstream is set), "file" or
	// "off" (default without upstream: the contract is not enforced).
	Source string `json:"source,omitempty" cfg:"line=-"`
	// File is the JSON file read when Source is "file": a registration, an
	// Agent Card, or an object mapping slug → either.
	File string `json:"file,omitempty" cfg:"line=-"`
	// Refresh is the card refresh period (default 60 s).
	Refresh Duration `json:"refresh,omitempty" cfg:"min=1s,max=24h"`
	// A2AVersions are the accepted A2A protocol versions of a card
	// (default 0.2.6, the version the seeds pin).
	A2AVersions []string `json:"a2a_versions,omitempty"`
	// A2UIVersions are the accepted A2UI versions of a card (default v0.8,
	// the version the seeds pin).
	A2UIVersions []string `json:"a2ui_versions,omitempty"`
}

// IdempotencyConfig makes confirm actions safe to retry in the proxy
// (docs/idempotency.md: the guarantee, the stores, what each survives).
// Caddyfile: idempotency [off] { }.
type IdempotencyConfig struct {
	// Store is "memory" (default: one process, lost at restart), "file"
	// (an embedded database file at FilePath: survives restarts of one
	// process), "redis" (shared by replicas) or "off".
	Store string `json:"store,omitempty" cfg:"custom"`
	// FilePath is the file store's database file (store file <path>); its
	// directory is created if missing. One process per file.
	FilePath string `json:"file_path,omitempty" cfg:"line=-"`
	// RedisURL is the Redis address in the syntax of RedisMode (required
	// with store redis).
	RedisURL string `json:"redis_url,omitempty" cfg:"secret"`
	// RedisMode is "single" (default), "sentinel" (RedisURL in the failover
	// syntax, redis://host:26379?master_name=mymaster&addr=host2:26379) or
	// "cluster" (redis://host1:7000?addr=host2:7001).
	RedisMode string `json:"redis_mode,omitempty"`
	// MinReplicasAck is the number of Redis replicas that must acknowledge
	// a claim before the call is forwarded, and a record after it (Redis
	// WAIT); 0 (default) waits for none.
	MinReplicasAck int `json:"min_replicas_ack,omitempty" cfg:"max=16,zero"`
	// ReplicaAckTimeout bounds each such WAIT (default 500 ms); fewer
	// acknowledgements by then count as not replicated.
	ReplicaAckTimeout Duration `json:"replica_ack_timeout,omitempty" cfg:"max=1m"`
	// KeyPrefix of every Redis key (default supervaizer:idem:<server_id>:).
	KeyPrefix string `json:"key_prefix,omitempty"`
	// TTL of a record (default 24 h, at least 1 s).
	TTL Duration `json:"ttl,omitempty" cfg:"min=1s,max=168h"`
	// LockTTL of an in-flight mark (default 2 min, at least 1 s): after a
	// forward whose outcome is unknown, retries get idempotency_in_progress
	// this long.
	LockTTL Duration `json:"lock_ttl,omitempty" cfg:"min=1s,max=24h"`
	// WaitTimeout bounds how long a retry waits on an in-flight call
	// (default 30 s, at least 1 s).
	WaitTimeout Duration `json:"wait_timeout,omitempty" cfg:"min=1s,max=10m"`
	// UpstreamTimeout bounds a covered call to the agent (default 60 s, at
	// least 1 s; in JSON nanoseconds, so 1 is 1 ns and refused).
	UpstreamTimeout Duration `json:"upstream_timeout,omitempty" cfg:"min=1s,max=1h"`
	// Actions covered besides job.start and the contract's setup start action.
	Actions []string `json:"actions,omitempty" cfg:"repeat"`
	// RequireKey refuses covered calls without idempotency_key (-32602).
	RequireKey bool `json:"require_idempotency_key,omitempty"`
	// MaxEntries bounds the records and in-flight marks of the memory and
	// file stores (default 10,000). With the Redis store it bounds nothing
	// itself (Redis's maxmemory does) but sets the default and the ceiling
	// of MaxEntriesPerWorkspace.
	MaxEntries int `json:"max_entries,omitempty" cfg:"max=10000000"`
	// MaxBytes bounds the recorded bytes of the memory and file stores
	// (default 64 MiB). With the Redis store it bounds nothing itself
	// (Redis's maxmemory does) but sets the default and the ceiling of
	// MaxBytesPerWorkspace.
	MaxBytes int64 `json:"max_bytes,omitempty" cfg:"max=64GiB"`
	// MaxEntriesPerWorkspace bounds one workspace's live records and
	// in-flight marks in every store (default max_entries/8, at most
	// max_entries): over it the workspace's own new keys are refused
	// (idempotency_store_unavailable, a message naming this setting),
	// never its neighbours'. Fewer than 8 workspaces at their default
	// shares cannot fill the store (docs/idempotency.md, "A workspace's
	// share").
	MaxEntriesPerWorkspace int `json:"max_entries_per_workspace,omitempty" cfg:"max=10000000"`
	// MaxBytesPerWorkspace bounds the recorded bytes of one workspace in
	// every store (default max_bytes/8, at most max_bytes): an answer that
	// would take its workspace past it is passed to the caller once, not
	// recorded, and its key stays in flight until lock_ttl (as an answer
	// over max_record_bytes), so one tenant cannot fill max_bytes (or
	// Redis's maxmemory) for the others.
	MaxBytesPerWorkspace int64 `json:"max_bytes_per_workspace,omitempty" cfg:"max=64GiB"`
	// MaxRecordBytes bounds one covered answer kept in memory to be
	// recorded (default 1 MiB): a larger answer is passed to the caller
	// once, not recorded, and its key stays in flight until lock_ttl.
	MaxRecordBytes int64 `json:"max_record_bytes,omitempty" cfg:"max=1GiB"`
}

// LimitsConfig is the limits block: rules, where rate state lives, and its
// bounds (docs/limits.md, "Fair sharing of an agent: limits"). Absent: no
// limit. Its rules and words are limits.Config's (Domain).
type LimitsConfig struct {
	// Rate rules: a token bucket per (agent, verified workspace), or per
	// (agent, transport key) for a call without one, for the calls whose
	// target matches (surface loads are surface:<id>). Caddyfile:
	// rate <pattern>... <n>/<s|m|h> [burst <b>].
	Rate []RateLimit `json:"rate,omitempty" cfg:"repeat,custom"`
	// Concurrency rules: calls of one (agent, workspace) in flight to the
	// agent through this sidecar. Caddyfile: concurrency <pattern>... <n>.
	Concurrency []ConcurrencyLimit `json:"concurrency,omitempty" cfg:"repeat,custom"`
	// Store is where rate state lives: "memory" (default: this process) or
	// "redis" (shared by every sidecar using the same Redis and key_prefix).
	// Caddyfile: store memory | redis <url>.
	Store string `json:"store,omitempty" cfg:"custom"`
	// RedisURL is the Redis address (required with store redis) in the
	// syntax of RedisMode, as idempotency's redis_url.
	RedisURL string `json:"redis_url,omitempty" cfg:"line=-,secret"`
	// RedisMode is "single" (default), "sentinel" or "cluster", as
	// idempotency's redis_mode.
	RedisMode string `json:"redis_mode,omitempty"`
	// MinReplicasAck is the number of Redis replicas that must acknowledge
	// each bucket update (Redis WAIT); fewer is a store error. Default 0,
	// at most 16; store redis only, as RedisURL, RedisMode,
	// ReplicaAckTimeout and KeyPrefix.
	MinReplicasAck int `json:"min_replicas_ack,omitempty" cfg:"max=16,zero"`
	// ReplicaAckTimeout bounds each such WAIT (default 500 ms, at most 1m).
	ReplicaAckTimeout Duration `json:"replica_ack_timeout,omitempty" cfg:"max=1m"`
	// KeyPrefix of every Redis key (default supervaizer:limit:<server_id>:).
	KeyPrefix string `json:"key_prefix,omitempty"`
	// OnStoreError is what a call does when Redis fails: "local" (default:
	// counted in this sidecar's own buckets, with a warn line, a metric and
	// a readiness note) or "deny" (refused rate_limited, retry after 1 s).
	OnStoreError string `json:"on_store_error,omitempty"`
	// MaxKeys bounds the tracked keys kept in memory in each of two pools:
	// rule × agent × verified workspace, and rule × agent × transport key
	// (calls without a verified workspace), least recently used of the pool
	// dropped first (default 100,000; 1 to 10,000,000: limits.Config).
	MaxKeys int `json:"max_keys,omitempty"`
}

// RateLimit is one rate rule.
type RateLimit struct {
	// Targets are target patterns (introspection's actions language).
	Targets []string `json:"targets"`
	// Rate is "<n>/s", "<n>/m" or "<n>/h", n from 1 to 1,000,000.
	Rate string `json:"rate"`
	// Burst is the bucket size (default n).
	Burst int `json:"burst,omitempty"`
}

// ConcurrencyLimit is one concurrency rule.
type ConcurrencyLimit struct {
	// Targets are target patterns (introspection's actions language).
	Targets []string `json:"targets"`
	// Max is the calls in flight allowed, 1 to 100,000 (limits.Config).
	Max int `json:"max" cfg:"zero"`
}

// ReferencesConfig binds the object references of a shared agent's calls
// to the workspace that first used or created them (docs/workspaces.md).
// Absent: off. Caddyfile: references [off] { }.
type ReferencesConfig struct {
	// Fields are the action-request fields bound (default job_id case_id
	// step_id draft_session_id request_id).
	Fields []string `json:"fields,omitempty"`
	// DataItems binds DataResource item ids from the create answer and
	// checks them on get, update and delete (default on).
	DataItems *bool `json:"data_items,omitempty"`
	// LearnFromEvents also learns job, case and step ids from the agent's
	// supervaizer.effect events (default on).
	LearnFromEvents *bool `json:"learn_from_events,omitempty"`
	// Unknown is what a reference bound to nobody does: "bind" (default:
	// bound to the caller, first use wins) or "deny" (refused as a foreign
	// one, except what the call creates).
	Unknown string `json:"unknown,omitempty"`
	// Store is "memory", "file", "redis" or "off" (default: the
	// idempotency block's store kind; memory without one).
	Store string `json:"store,omitempty" cfg:"custom"`
	// FilePath is the file store's database (store file <path>; default,
	// when the idempotency store is file: its path + ".references").
	FilePath string `json:"file_path,omitempty" cfg:"line=-"`
	// RedisURL is the Redis address (default, when the idempotency store
	// is redis: its redis_url); the idempotency block's redis_mode applies.
	RedisURL string `json:"redis_url,omitempty" cfg:"secret"`
	// TTL: a binding lives this long after its last use (default 720h).
	TTL Duration `json:"ttl,omitempty" cfg:"min=1s,max=8760h"`
	// MaxEntries bounds the bindings of the memory and file stores in all
	// (default 100,000: about 38 MiB at about 400 bytes each, sized for the
	// k8s base's 256 MiB container; docs/workspaces.md, "Sizing"): past it
	// a new binding is refused (store_full), never another workspace's
	// taken; the file store reads back at most this many at start (the
	// most recently used) and deletes the rest. With the Redis store it
	// bounds nothing itself (Redis's maxmemory does) but sets the default
	// and the ceiling of MaxPerWorkspace.
	MaxEntries int `json:"max_entries,omitempty" cfg:"max=10000000"`
	// MaxPerWorkspace bounds one workspace's bindings (default
	// max_entries/8, 12,500 at the default; at most max_entries): past it,
	// its own least recently used go first.
	MaxPerWorkspace int `json:"max_per_workspace,omitempty" cfg:"max=10000000"`
}
