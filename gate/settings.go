// The effective settings of a built gate: what `supervaizer check` prints
// and /_sidecar/status shows (Setting, ops.go), in the order of the
// README's directive reference. Secrets appear as Fingerprint, URLs
// through the one redaction (internal/redact), an inline PEM as its
// fingerprint.

package gate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/limits"
)

// ResolvedAuth is what caddymodule's build resolved from the config and
// the environment for workspace authorization (caddymodule/provision.go),
// so that the effective settings shown are the ones used.
type ResolvedAuth struct {
	Local, Required bool
	Issuer          string
	Audience        string // "" when the default supervaizer-server:<server_id> applies
	PublicKey       string // PEM path or inline PEM
	JWKSURL         string
	Leeway          time.Duration // the effective leeway (grants.DefaultLeeway when unset)
	AnySet          bool          // some workspace_auth setting is present (config or environment)
	// Sources name where each environment-backed setting came from, by
	// its name in the settings ("server_id", "api_key", "local_mode",
	// "workspace_auth required", "workspace_auth issuer"...): "config",
	// "$<VARIABLE>" or "default".
	Sources map[string]string
}

// given is the source of a setting without an environment variable.
func given(inConfig bool) string {
	if inConfig {
		return "config"
	}
	return "default"
}

// Settings lists the effective settings of g, built from c with the
// authorization ra resolved.
func (c *Config) Settings(g *Gate, ra *ResolvedAuth) []Setting {
	var out []Setting
	add := func(name, value, source string) {
		out = append(out, Setting{Name: name, Value: value, Source: source})
	}
	add("mode", g.ModeName(), "resolved")
	add("server_id", orNone(g.ServerID), ra.Sources["server_id"])
	for _, k := range g.Keys {
		scope := "read"
		if k.Write {
			scope = "write"
		}
		add("api_key", k.FP+" "+scope, ra.Sources["api_key"])
	}
	slugs := make([]string, 0, len(g.Agents))
	for slug := range g.Agents {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	for _, slug := range slugs {
		add("agent", strings.TrimSpace(slug+" "+g.Agents[slug]), "config")
	}
	if len(slugs) == 0 {
		add("agent", "(none)", "config")
	}
	c.addAuthSettings(g, ra, add)
	if c.Upstream != "" {
		add("upstream", redact.URL(c.Upstream), "config")
	}
	add("registration", c.registrationSetting(), given(c.RegistrationSource != ""))
	add("idempotency", idempotencySetting(c.Idempotency), given(c.Idempotency != nil && c.Idempotency.Store != ""))
	addIdempotencySettings(c.Idempotency, add)
	add("events_fanout", fmt.Sprint(c.EventsFanout), given(c.EventsFanout))
	add("events_require_workspace_token", fmt.Sprint(c.EventsRequireToken), given(c.EventsRequireToken))
	add("legacy_routes", orDefault(c.LegacyRoutes, "allow"), given(c.LegacyRoutes != ""))
	add("other_routes", orDefault(c.OtherRoutes, "deny"), given(c.OtherRoutes != ""))
	addLimitsSettings(c.Limits, g.ServerID, add)
	c.addForwardSettings(g, add)
	return out
}

// addAuthSettings lists workspace authorization as resolved.
func (c *Config) addAuthSettings(g *Gate, ra *ResolvedAuth, add func(name, value, source string)) {
	add("local_mode", fmt.Sprint(ra.Local), ra.Sources["local_mode"])
	add("workspace_auth required", fmt.Sprint(ra.Required), ra.Sources["workspace_auth required"])
	add("workspace_auth issuer", orNone(ra.Issuer), ra.Sources["workspace_auth issuer"])
	if ra.Audience != "" {
		add("workspace_auth audience", ra.Audience, ra.Sources["workspace_auth audience"])
	} else {
		add("workspace_auth audience", "supervaizer-server:"+g.ServerID, "default")
	}
	if ra.PublicKey != "" {
		v := ra.PublicKey
		if strings.Contains(v, "-----BEGIN") || strings.Contains(v, `\n`) {
			v = "inline PEM " + Fingerprint(v)
		}
		add("workspace_auth public_key", v, ra.Sources["workspace_auth public_key"])
	}
	if ra.JWKSURL != "" {
		add("workspace_auth jwks_url", redact.URL(ra.JWKSURL), ra.Sources["workspace_auth jwks_url"])
		for _, p := range []struct {
			name     string
			set, def time.Duration
		}{
			{"jwks_refresh", c.Auth.JWKSRefresh, grants.DefaultJWKSRefresh},
			{"jwks_unknown_kid_interval", c.Auth.JWKSUnknownKIDInterval, grants.DefaultJWKSUnknownKIDInterval},
			{"jwks_timeout", c.Auth.JWKSTimeout, grants.DefaultJWKSTimeout},
		} {
			add("workspace_auth "+p.name, orDefault(p.set, p.def).String(), given(p.set != 0))
		}
		add("workspace_auth jwks_max_stale", durationOrOff(c.Auth.JWKSMaxStale), given(c.Auth.JWKSMaxStale != 0))
	}
	add("workspace_auth leeway", ra.Leeway.String(), ra.Sources["workspace_auth leeway"])
	add("workspace_auth max_token_lifetime", durationOrOff(c.Auth.MaxTokenLifetime), given(c.Auth.MaxTokenLifetime != 0))
	add("workspace_auth cache_size", strconv.Itoa(orDefault(c.Auth.CacheSize, grants.DefaultCacheSize)), given(c.Auth.CacheSize != 0))
	add("workspace_auth introspection", introspectionSetting(c.Auth.Introspection), given(c.Auth.Introspection != nil))
}

// addForwardSettings lists what shapes a forwarded call: the body bounds
// and the body memory budget this handler asks for, the token and
// verified context forwarded, the audit log.
func (c *Config) addForwardSettings(g *Gate, add func(name, value, source string)) {
	add("max_body_a2a", humanize.IBytes(uint64(g.MaxBodyA2A)), given(c.MaxBodyA2A != 0 || c.MaxBody != 0))
	add("max_body_data", humanize.IBytes(uint64(g.MaxBodyData)), given(c.MaxBodyData != 0 || c.MaxBody != 0))
	add("max_body", humanize.IBytes(uint64(g.MaxBody)), given(c.MaxBody != 0))
	add("body_memory", humanize.IBytes(uint64(c.EffectiveBodyMemory())), given(c.BodyMemory != 0))
	add("body_timeout", g.BodyTimeout.String(), given(c.BodyTimeout != 0))
	add("forward_token", onOff(g.ForwardToken), given(c.ForwardToken != nil))
	add("verified_headers", g.Verified.String(), given(c.VerifiedHeaders != nil || c.VerifiedHeadersForm != ""))
	audit := "all"
	if !g.AuditAllows {
		audit = "deny"
	}
	add("audit_log", audit, given(c.AuditLog != ""))
}

// addLimitsSettings lists the limits: each rule as written, then the
// store (its URL redacted; with Redis its min_replicas_ack,
// replica_ack_timeout and key_prefix), on_store_error and max_keys;
// "limits off" without a block.
func addLimitsSettings(lc *limits.Config, serverID string, add func(name, value, source string)) {
	if lc == nil {
		add("limits", "off", "default")
		return
	}
	rules, _ := lc.Rules()
	for _, r := range rules {
		add("limits rule", r.String(), "config")
	}
	store := "memory"
	if lc.Store == limits.StoreRedis {
		store = "redis " + lc.EffectiveRedisMode() + " " + redact.URL(lc.RedisURL)
	}
	add("limits store", store, given(lc.Store != ""))
	if lc.Store == limits.StoreRedis {
		add("limits min_replicas_ack", strconv.Itoa(lc.MinReplicasAck), given(lc.MinReplicasAck != 0))
		add("limits replica_ack_timeout", lc.EffectiveReplicaAckTimeout().String(), given(lc.ReplicaAckTimeout != 0))
		add("limits key_prefix", lc.EffectiveKeyPrefix(serverID), given(lc.KeyPrefix != ""))
	}
	add("limits on_store_error", lc.EffectiveOnStoreError(), given(lc.OnStoreError != ""))
	add("limits max_keys", strconv.Itoa(lc.EffectiveMaxKeys()), given(lc.MaxKeys != 0))
}

// orDefault is v, or def when v is the zero value (the setting unset).
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// durationOrOff is d, or "off" for 0 (a bound that is off by default).
func durationOrOff(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return d.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// registrationSetting is the registration source in words: "from_upstream",
// "file <path>", "off", or "off (no upstream: contract not enforced)".
func (c *Config) registrationSetting() string {
	src, notEnforced, err := c.RegistrationKind()
	switch {
	case err != nil && c.RegistrationSource != "":
		return c.RegistrationSource + " (invalid)"
	case err != nil:
		return "invalid"
	case notEnforced:
		return "off (no upstream: contract not enforced)"
	case src == "file":
		return "file " + c.RegistrationFile
	case src == "":
		return "off"
	}
	return src
}

// idempotencySetting is the idempotency store in words, its Redis URL
// redacted: "memory", "file <path>", "redis <mode> <url>" or "off".
func idempotencySetting(ic *IdempotencyConfig) string {
	if ic == nil {
		return "memory"
	}
	switch ic.Store {
	case "", "memory":
		return "memory"
	case "file":
		return "file " + ic.FilePath
	case "redis":
		mode, u := ic.RedisMode, ic.RedisURL
		if mode == "" {
			mode = idempotency.RedisModeSingle
		}
		if u == "" {
			u = idempotency.DefaultRedisURL
		}
		return "redis " + mode + " " + redact.URL(u)
	}
	return ic.Store
}

// addIdempotencySettings lists, when a block is given and idempotency is
// on, the guard's durations (set or default), the covered actions and the
// store bounds the block sets.
func addIdempotencySettings(ic *IdempotencyConfig, add func(name, value, source string)) {
	if ic == nil || ic.Store == "off" {
		return
	}
	for _, d := range []struct {
		name     string
		set, def time.Duration
	}{
		{"ttl", ic.TTL, idempotency.DefaultTTL}, {"lock_ttl", ic.LockTTL, idempotency.DefaultLockTTL},
		{"wait_timeout", ic.WaitTimeout, idempotency.DefaultWaitTimeout},
		{"upstream_timeout", ic.UpstreamTimeout, idempotency.DefaultUpstreamTimeout},
	} {
		v := d.set
		if v == 0 {
			v = d.def
		}
		add("idempotency "+d.name, v.String(), given(d.set != 0))
	}
	add("idempotency actions", strings.Join(append([]string{"job.start"}, ic.Actions...), " "), given(len(ic.Actions) > 0))
	for _, b := range []struct {
		name string
		v    int64
	}{
		{"max_entries", int64(ic.MaxEntries)}, {"max_entries_per_workspace", int64(ic.MaxEntriesPerWorkspace)},
		{"max_bytes", ic.MaxBytes}, {"max_bytes_per_workspace", ic.MaxBytesPerWorkspace},
		{"max_record_bytes", ic.MaxRecordBytes},
	} {
		if b.v != 0 {
			add("idempotency "+b.name, strconv.FormatInt(b.v, 10), "config")
		}
	}
}

// introspectionSetting is the introspection in words: "off", or its URL
// redacted, how the sidecar authenticates (bearer, basic or none; never
// the credential) and the covered targets.
func introspectionSetting(ic *IntrospectionConfig) string {
	if ic == nil {
		return "off"
	}
	return redact.URL(ic.URL) + " auth " + ic.Auth + " actions " + strings.Join(ic.Actions, ",")
}
