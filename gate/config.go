// The resolved configuration of one gate, as plain values, and its one
// validation: every range (settingBounds, bounds.go), every word and every
// rule between settings, written once. caddymodule maps its JSON fields
// (the Caddyfile adapts to the same JSON) onto Config
// (caddymodule/config.go), so a Caddyfile and the equivalent JSON config
// are refused or accepted identically (docs/directives.md, "Directive reference",
// lists each bound).

package gate

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/dustin/go-humanize"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/limits"
	"github.com/supervaize/supervaizer-sidecar/pattern"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// Config is a gate's configuration, each setting as written (a zero value
// is the setting's default) except where a field says so.
type Config struct {
	// ServerID is server_id as written ("" before the environment fallback).
	ServerID string
	// APIKeys are the api_key lines.
	APIKeys []ConfigKey
	// Agents maps each agent slug to its Studio agent id.
	Agents map[string]string
	// MaxBody, MaxBodyA2A, MaxBodyData and BodyMemory are the body bounds
	// and the body memory budget, in bytes.
	MaxBody, MaxBodyA2A, MaxBodyData, BodyMemory int64
	// BodyTimeout bounds the time to receive a request body.
	BodyTimeout time.Duration
	// VerifiedHeadersForm is verified_headers_form ("", headers, compact).
	VerifiedHeadersForm string
	// LegacyRoutes is legacy_routes ("", allow, deny).
	LegacyRoutes string
	// OtherRoutes is other_routes ("", deny, api_key, public).
	OtherRoutes string
	// AuditLog is audit_log ("", all, deny).
	AuditLog string
	// Auth are workspace_auth's bounded settings.
	Auth AuthConfig
	// ForwardToken and VerifiedHeaders are forward_token and
	// verified_headers as written (nil: unset, on).
	ForwardToken, VerifiedHeaders *bool
	// EventsFanout is events_fanout.
	EventsFanout bool
	// EventsRequireToken is events_require_workspace_token.
	EventsRequireToken bool
	// Upstream is the agent's base URL as written.
	Upstream string
	// RegistrationSource ("", from_upstream, file, off), RegistrationFile
	// and RegistrationRefresh are the registration block.
	RegistrationSource, RegistrationFile string
	RegistrationRefresh                  time.Duration
	// A2AVersions and A2UIVersions are the card versions accepted
	// (default: registration's).
	A2AVersions, A2UIVersions []string
	// Idempotency is the idempotency block; nil when absent.
	Idempotency *IdempotencyConfig
	// Limits is the limits block; nil when absent.
	Limits *limits.Config
}

// ConfigKey is one api_key line: the key and its scope ("", read, write).
type ConfigKey struct {
	Key, Scope string
}

// AuthConfig are workspace_auth's bounded settings.
type AuthConfig struct {
	// Leeway is leeway as written; nil: unset (0 means none).
	Leeway *time.Duration
	// JWKSRefresh, JWKSUnknownKIDInterval, JWKSTimeout and JWKSMaxStale
	// are the JWKS source's periods.
	JWKSRefresh, JWKSUnknownKIDInterval, JWKSTimeout, JWKSMaxStale time.Duration
	// MaxTokenLifetime bounds exp - iat.
	MaxTokenLifetime time.Duration
	// CacheSize bounds the verified-token cache.
	CacheSize int
	// Introspection is the introspection block; nil when absent.
	Introspection *IntrospectionConfig
}

// IntrospectionConfig is the introspection block: its bounded settings,
// and for the effective settings its URL (placeholders resolved), how the
// sidecar authenticates ("bearer", "basic" or "none") and the covered
// targets in effect.
type IntrospectionConfig struct {
	Timeout, CacheTTL, NegativeCacheTTL time.Duration
	CacheSize                           int
	URL, Auth                           string
	Actions                             []string
}

// IdempotencyConfig is the idempotency block.
type IdempotencyConfig struct {
	// Store is "" (memory), memory, file, redis or off.
	Store string
	// FilePath, RedisURL, RedisMode and KeyPrefix are the store's own
	// settings.
	FilePath, RedisURL, RedisMode, KeyPrefix string
	// MinReplicasAck and ReplicaAckTimeout are the Redis WAIT settings.
	MinReplicasAck    int
	ReplicaAckTimeout time.Duration
	// TTL, LockTTL, WaitTimeout and UpstreamTimeout are the guard's
	// durations.
	TTL, LockTTL, WaitTimeout, UpstreamTimeout time.Duration
	// MaxEntries, MaxEntriesPerWorkspace, MaxBytes, MaxBytesPerWorkspace
	// bound the stores; MaxRecordBytes bounds one recorded answer.
	MaxEntries, MaxEntriesPerWorkspace             int
	MaxBytes, MaxBytesPerWorkspace, MaxRecordBytes int64
	// Actions are the covered actions besides job.start: exact action
	// names.
	Actions []string
}

// MemoryLimits are the memory and file stores' bounds of ic.
func (ic *IdempotencyConfig) MemoryLimits() idempotency.MemoryOptions {
	return idempotency.MemoryOptions{MaxEntries: ic.MaxEntries, MaxBytes: ic.MaxBytes,
		MaxEntriesPerGroup: ic.MaxEntriesPerWorkspace, MaxBytesPerGroup: ic.MaxBytesPerWorkspace}
}

// Default body bounds, in bytes, when max_body is not set (docs/errors.md, "Body
// limits").
const (
	DefaultMaxBody     = 1 << 20  // public, events, legacy and other routes: 1 MiB
	DefaultMaxBodyA2A  = 16 << 20 // POST /a2a: 16 MiB (inline file fields)
	DefaultMaxBodyData = 16 << 20 // DataResource routes: 16 MiB (bulk imports)
	// DefaultBodyTimeout bounds the time to receive a body when
	// body_timeout is not set.
	DefaultBodyTimeout = 10 * time.Second
)

// EffectiveBodyBounds are max_body, max_body_a2a and max_body_data in
// effect: each as set, else max_body when that is set, else its default.
func (c *Config) EffectiveBodyBounds() (maxBody, a2a, data int64) {
	pick := func(v, fallback int64) int64 {
		switch {
		case v > 0:
			return v
		case c.MaxBody > 0:
			return c.MaxBody
		}
		return fallback
	}
	return pick(c.MaxBody, DefaultMaxBody), pick(c.MaxBodyA2A, DefaultMaxBodyA2A), pick(c.MaxBodyData, DefaultMaxBodyData)
}

// EffectiveBodyMemory is the body memory budget in effect: body_memory,
// else DefaultBodyMemory.
func (c *Config) EffectiveBodyMemory() int64 {
	if c.BodyMemory > 0 {
		return c.BodyMemory
	}
	return DefaultBodyMemory
}

// EffectiveBodyTimeout is body_timeout in effect.
func (c *Config) EffectiveBodyTimeout() time.Duration {
	if c.BodyTimeout > 0 {
		return c.BodyTimeout
	}
	return DefaultBodyTimeout
}

// Apply sets g's plain settings from c, already checked by Validate: the
// body bounds and timeout in effect, the header switches and the route
// policy.
func (c *Config) Apply(g *Gate) {
	g.MaxBody, g.MaxBodyA2A, g.MaxBodyData = c.EffectiveBodyBounds()
	g.BodyTimeout = c.EffectiveBodyTimeout()
	g.ForwardToken = c.ForwardToken == nil || *c.ForwardToken
	g.Verified = c.verifiedForm()
	g.EventsRequireToken = c.EventsRequireToken
	g.LegacyAllowed = c.LegacyRoutes != "deny"
	g.AuditAllows = c.AuditLog != "deny"
	switch c.OtherRoutes {
	case "api_key":
		g.OtherRoutes = OtherAPIKey
	case "public":
		g.OtherRoutes = OtherPublic
	default:
		g.OtherRoutes = OtherDeny
	}
}

// verifiedForm resolves verified_headers (default on) and
// verified_headers_form (default headers).
func (c *Config) verifiedForm() VerifiedForm {
	switch {
	case c.VerifiedHeaders != nil && !*c.VerifiedHeaders:
		return VerifiedOff
	case c.VerifiedHeadersForm == VerifiedFormCompact:
		return VerifiedCompact
	}
	return VerifiedEach
}

// Validate returns every problem of c that needs neither I/O nor the
// environment, each naming its setting: every bound (settingBounds,
// bounds.go), the words, the invariants between settings
// (checkInvariants) and the limits block (limits.Config.Validate); nil
// when there is none.
func (c *Config) Validate() error {
	errs := append(c.checkBounds(), c.checkInvariants()...)
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	for _, w := range []struct {
		name, value string
		allowed     []string
		say         string
	}{
		{"legacy_routes", c.LegacyRoutes, []string{"", "allow", "deny"}, "allow or deny"},
		{"verified_headers_form", c.VerifiedHeadersForm, []string{"", VerifiedFormHeaders, VerifiedFormCompact}, "headers or compact"},
		{"audit_log", c.AuditLog, []string{"", "all", "deny"}, "all or deny"},
		{"other_routes", c.OtherRoutes, []string{"", "deny", "api_key", "public"}, "deny, api_key or public"},
	} {
		if !slices.Contains(w.allowed, w.value) {
			bad("%s must be %s, not %q", w.name, w.say, w.value)
		}
	}
	if c.Limits != nil {
		for _, err := range c.Limits.Validate() {
			errs = append(errs, fmt.Errorf("supervaizer_auth: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkInvariants returns the problems between settings, each naming both:
// the body memory budget below the /a2a bound, a key given twice, the keys,
// slugs, ids and server id no request could match (checkHeaderValues),
// and the idempotency invariants (idempotencyInvariants).
func (c *Config) checkInvariants() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	// On the effective values, defaults included: a max_body_a2a over the
	// default budget, body_memory not set, would answer every call over
	// the budget a retryable 503 forever.
	if _, a2a, _ := c.EffectiveBodyBounds(); c.EffectiveBodyMemory() < a2a {
		what := humanize.IBytes(uint64(c.EffectiveBodyMemory()))
		if c.BodyMemory == 0 {
			what += ", the default"
		}
		bad("body_memory (%s) must be at least max_body_a2a (%s): a call at the bound could never be held; set body_memory",
			what, humanize.IBytes(uint64(a2a)))
	}
	seen := map[string]int{}
	for i, k := range c.APIKeys {
		if j, dup := seen[k.Key]; dup && k.Key != "" {
			bad("api_key %s is given twice (api_key %d and %d): one line per key, with its scope", Fingerprint(k.Key), j+1, i+1)
		}
		seen[k.Key] = i
	}
	errs = append(errs, c.checkHeaderValues()...)
	if ic := c.Idempotency; ic != nil && ic.Store != "off" {
		errs = append(errs, idempotencyInvariants(ic)...)
	}
	return errs
}

// checkHeaderValues refuses the names and keys that could never match
// what a request carries: a key with surrounding spaces or a control
// character (an HTTP header value has neither), an agent slug outside
// registration.CheckSlug's rule (the one rule of a slug), an agent id with
// a space or a control character (a token's claim is compared to it as
// is), a server id with a space (any whitespace) or a control character.
func (c *Config) checkHeaderValues() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("supervaizer_auth: "+format, args...))
	}
	for i, k := range c.APIKeys {
		if k.Key != "" && (strings.TrimSpace(k.Key) != k.Key || hasControl(k.Key)) {
			bad("api_key %d must not have surrounding spaces or control characters: a header never carries them, so it could never match", i+1)
		}
	}
	for slug, id := range c.Agents {
		switch err := registration.CheckSlug(slug); {
		case err != nil:
			bad("agents: %v", err)
		case strings.ContainsFunc(id, isSpaceOrControl):
			bad("agent %q %q: an agent id holds no space or control character", slug, id)
		}
	}
	if strings.ContainsFunc(c.ServerID, isSpaceOrControl) || strings.ContainsFunc(c.ServerID, unicode.IsSpace) {
		bad("server_id %q must not be blank or hold a space or a control character", c.ServerID)
	}
	return errs
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// idempotencyInvariants are the idempotency block's rules between
// settings, each checked by its owner (idempotency/validate.go): the
// guard's durations (ttl at least lock_ttl, lock_ttl above
// upstream_timeout), each per-workspace share at most its total and its
// default share (an eighth of the total) not 0, and the store-specific
// settings only with their store.
func idempotencyInvariants(ic *IdempotencyConfig) []error {
	var errs []error
	add := func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				errs = append(errs, fmt.Errorf("supervaizer_auth: idempotency %w", e))
			}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("supervaizer_auth: idempotency %w", err))
		}
	}
	add(idempotency.Options{TTL: ic.TTL, LockTTL: ic.LockTTL, UpstreamTimeout: ic.UpstreamTimeout}.Validate())
	add(ic.MemoryLimits().Validate())
	var set []string
	for name, given := range map[string]bool{
		"redis_url": ic.RedisURL != "", "redis_mode": ic.RedisMode != "",
		"min_replicas_ack": ic.MinReplicasAck != 0, "replica_ack_timeout": ic.ReplicaAckTimeout != 0,
		"key_prefix": ic.KeyPrefix != "", "file_path": ic.FilePath != "",
		"max_entries": ic.MaxEntries != 0, "max_entries_per_workspace": ic.MaxEntriesPerWorkspace != 0,
	} {
		if given {
			set = append(set, name)
		}
	}
	slices.Sort(set) // one order from one config
	for _, err := range idempotency.CheckStoreSettings(ic.Store, set) {
		add(err)
	}
	for _, a := range ic.Actions {
		// An action the guard would never meet (a comma list, a pattern, a
		// blank) would leave the calls meant to be covered uncovered.
		if p, err := pattern.Parse(a); err != nil || p.Namespace() != "" || strings.Contains(a, "*") {
			add(fmt.Errorf("actions: %q is not an action name (letters, digits, _ and -, separated by dots; one name an argument, no * and no namespace)", a))
		}
	}
	if ic.Store == idempotency.StoreRedis && ic.RedisURL == "" {
		// No default address: in a pod 127.0.0.1 is the pod's own, where
		// no shared store runs (the limits block refuses the same).
		add(errors.New("store redis needs redis_url"))
	}
	return errs
}

// RegistrationKind validates the registration settings and returns the
// source kind ("from_upstream" or "file"), or "" when registration is off
// (notEnforced: off only because no upstream is set).
//
// Errors: an unknown source; file without a path; from_upstream without an
// upstream (named by the error); no agent configured while a source is on;
// an upstream that is not an http(s) URL.
func (c *Config) RegistrationKind() (src string, notEnforced bool, err error) {
	src = c.RegistrationSource
	if src == "" {
		if c.Upstream == "" {
			return "", true, nil
		}
		src = "from_upstream"
	}
	switch src {
	case "off":
		return "", false, nil
	case "from_upstream":
		if _, err := c.UpstreamURL("registration from_upstream"); err != nil {
			return "", false, err
		}
	case "file":
		if c.RegistrationFile == "" {
			return "", false, errors.New("supervaizer_auth: registration file needs a path")
		}
	default:
		return "", false, fmt.Errorf("supervaizer_auth: registration must be from_upstream, file or off, not %q", src)
	}
	if len(c.Agents) == 0 {
		return "", false, fmt.Errorf("supervaizer_auth: registration %s needs at least one agent <slug> line", src)
	}
	return src, false, nil
}

// UpstreamURL returns the upstream setting without a trailing slash, for
// the setting named by who. Errors: no upstream (naming who needs it), or
// one that is not an http(s) URL with a host.
func (c *Config) UpstreamURL(who string) (string, error) {
	if c.Upstream == "" {
		return "", fmt.Errorf("supervaizer_auth: %s needs upstream <url> (the agent's base URL, e.g. http://127.0.0.1:8000)", who)
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("supervaizer_auth: upstream %q must be an http(s) URL", redact.URL(c.Upstream))
	}
	return strings.TrimRight(c.Upstream, "/"), nil
}
