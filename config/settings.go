// The effective settings of a built handler: what `supervaizer check`
// prints and /_sidecar/status shows, in the order of the directive
// reference (docs/directives.md). TestEffectiveSettingsListEveryField
// holds the list to the table of settings (table.go). Secrets appear as Fingerprint, URLs
// through the one redaction (internal/redact), an inline PEM as its
// fingerprint.

package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/introspection"
	"github.com/supervaize/supervaizer-sidecar/limits"
	"github.com/supervaize/supervaizer-sidecar/references"
	"github.com/supervaize/supervaizer-sidecar/registration"
)

// Setting is one effective setting of a handler, as `supervaizer check`
// prints it and /_sidecar/status shows it: its name, its value (secrets as
// fingerprints, URLs through redact.URL) and where it came from ("config",
// "$<ENV>", or "default").
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Resolved is what the build resolved from the config and the
// environment (Resolve, env.go; gate/new.go), so that the
// effective settings shown and the start-up checks judge the values used.
type Resolved struct {
	// Mode is token, local or not_configured.
	Mode string
	// ServerID is the server id in effect.
	ServerID string
	// Keys are the transport keys in effect: fingerprint and scope.
	Keys []ResolvedKey
	// Auth is the workspace authorization resolved.
	Auth *ResolvedAuth
}

// ResolvedKey is one transport key in effect.
type ResolvedKey struct {
	Key   string `json:"-"` // the secret itself, for the gate's key check
	FP    string
	Write bool
}

// The modes of Resolved.Mode.
const (
	ModeToken         = "token"
	ModeLocal         = "local"
	ModeNotConfigured = "not_configured"
)

// ResolvedAuth is workspace authorization as resolved from the config and
// the environment.
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

// shownWithin are the settings the effective settings show within the line
// of another (a block's one line, a store's words), by the line's name:
// TestEffectiveSettingsListEveryField holds every other setting of the
// table to a line of its own.
var shownWithin = map[string]string{
	"api_key scope":         "api_key",
	"verified_headers_form": "verified_headers",
	"registration source":   "registration", "registration file": "registration",
	"idempotency store": "idempotency", "idempotency file_path": "idempotency",
	"idempotency redis_url": "idempotency", "idempotency redis_mode": "idempotency",
	"limits rate": "limits rule", "limits rate targets": "limits rule", "limits rate rate": "limits rule",
	"limits rate burst": "limits rule", "limits concurrency": "limits rule",
	"limits concurrency targets": "limits rule", "limits concurrency max": "limits rule",
	"limits redis_url": "limits store", "limits redis_mode": "limits store",
	"references store": "references store", "references file_path": "references store",
	"references redis_url":             "references store",
	"workspace_auth introspection url": "workspace_auth introspection", "workspace_auth introspection actions": "workspace_auth introspection",
	"workspace_auth introspection client_id":     "workspace_auth introspection",
	"workspace_auth introspection client_secret": "workspace_auth introspection",
	"workspace_auth introspection bearer":        "workspace_auth introspection",
	"workspace_auth introspection timeout":       "workspace_auth introspection", "workspace_auth introspection cache_ttl": "workspace_auth introspection",
	"workspace_auth introspection negative_cache_ttl": "workspace_auth introspection",
	"workspace_auth introspection cache_size":         "workspace_auth introspection",
}

// given is the source of a setting without an environment variable.
func given(inConfig bool) string {
	if inConfig {
		return "config"
	}
	return "default"
}

// Settings lists the effective settings of c with what r resolved.
func (c *Config) Settings(r *Resolved) []Setting {
	ra := r.Auth
	var out []Setting
	add := func(name, value, source string) {
		out = append(out, Setting{Name: name, Value: value, Source: source})
	}
	add("mode", r.Mode, "resolved")
	add("server_id", orNone(r.ServerID), ra.Sources["server_id"])
	for _, k := range r.Keys {
		scope := "read"
		if k.Write {
			scope = "write"
		}
		add("api_key", k.FP+" "+scope, ra.Sources["api_key"])
	}
	slugs := c.AgentSlugs()
	for _, slug := range slugs {
		add("agent", strings.TrimSpace(slug+" "+c.Agents[slug]), "config")
	}
	if len(slugs) == 0 {
		add("agent", "(none)", "config")
	}
	c.addAuthSettings(r, add)
	if c.Upstream != "" {
		add("upstream", redact.URL(c.Upstream), "config")
	}
	add("registration", c.registrationSetting(), given(c.RegistrationBlock().Source != ""))
	c.addRegistrationSettings(add)
	add("idempotency", idempotencySetting(c.Idempotency), given(c.Idempotency != nil && c.Idempotency.Store != ""))
	addIdempotencySettings(c.Idempotency, r.ServerID, add)
	add("events_fanout", fmt.Sprint(c.EventsFanout), given(c.EventsFanout))
	add("events_require_workspace_token", fmt.Sprint(c.EventsRequireWorkspaceToken), given(c.EventsRequireWorkspaceToken))
	add("legacy_routes", orDefault(c.LegacyRoutes, "allow"), given(c.LegacyRoutes != ""))
	add("other_routes", orDefault(c.OtherRoutes, "deny"), given(c.OtherRoutes != ""))
	addLimitsSettings(c.Limits, r.ServerID, add)
	c.addReferencesSettings(add)
	c.addForwardSettings(add)
	return out
}

// addAuthSettings lists workspace authorization as resolved.
func (c *Config) addAuthSettings(r *Resolved, add func(name, value, source string)) {
	ra, wa := r.Auth, c.AuthBlock()
	add("local_mode", fmt.Sprint(ra.Local), ra.Sources["local_mode"])
	add("workspace_auth required", fmt.Sprint(ra.Required), ra.Sources["workspace_auth required"])
	add("workspace_auth issuer", orNone(ra.Issuer), ra.Sources["workspace_auth issuer"])
	if ra.Audience != "" {
		add("workspace_auth audience", ra.Audience, ra.Sources["workspace_auth audience"])
	} else {
		add("workspace_auth audience", "supervaizer-server:"+r.ServerID, "default")
	}
	if ra.PublicKey != "" {
		v := ra.PublicKey
		if strings.Contains(v, "-----BEGIN") || strings.Contains(v, `\n`) {
			v = "inline PEM " + redact.Fingerprint(v)
		}
		add("workspace_auth public_key", v, ra.Sources["workspace_auth public_key"])
	}
	if ra.JWKSURL != "" {
		add("workspace_auth jwks_url", redact.URL(ra.JWKSURL), ra.Sources["workspace_auth jwks_url"])
		for _, p := range []struct {
			name     string
			set, def time.Duration
		}{
			{"jwks_refresh", wa.JWKSRefresh.D(), grants.DefaultJWKSRefresh},
			{"jwks_unknown_kid_interval", wa.JWKSUnknownKIDInterval.D(), grants.DefaultJWKSUnknownKIDInterval},
			{"jwks_timeout", wa.JWKSTimeout.D(), grants.DefaultJWKSTimeout},
		} {
			add("workspace_auth "+p.name, orDefault(p.set, p.def).String(), given(p.set != 0))
		}
		add("workspace_auth jwks_max_stale", durationOrOff(wa.JWKSMaxStale.D()), given(wa.JWKSMaxStale != 0))
	}
	add("workspace_auth leeway", ra.Leeway.String(), ra.Sources["workspace_auth leeway"])
	add("workspace_auth max_token_lifetime", durationOrOff(wa.MaxTokenLifetime.D()), given(wa.MaxTokenLifetime != 0))
	add("workspace_auth cache_size", strconv.Itoa(orDefault(wa.CacheSize, grants.DefaultCacheSize)), given(wa.CacheSize != 0))
	add("workspace_auth introspection", introspectionSetting(wa.Introspection), given(wa.Introspection != nil))
}

// addForwardSettings lists what shapes a forwarded call: the body bounds
// and the body memory budget this handler asks for, the token and
// verified context forwarded, the audit log.
func (c *Config) addForwardSettings(add func(name, value, source string)) {
	maxBody, a2a, data := c.EffectiveBodyBounds()
	add("max_body_a2a", humanize.IBytes(uint64(a2a)), given(c.MaxBodyA2A != 0 || c.MaxBody != 0))
	add("max_body_data", humanize.IBytes(uint64(data)), given(c.MaxBodyData != 0 || c.MaxBody != 0))
	add("max_body", humanize.IBytes(uint64(maxBody)), given(c.MaxBody != 0))
	add("body_memory", humanize.IBytes(uint64(c.EffectiveBodyMemory())), given(c.BodyMemory != 0))
	add("body_timeout", c.EffectiveBodyTimeout().String(), given(c.BodyTimeout != 0))
	add("forward_token", onOff(c.ForwardToken == nil || *c.ForwardToken), given(c.ForwardToken != nil))
	add("verified_headers", c.VerifiedHeadersSetting(), given(c.VerifiedHeaders != nil || c.VerifiedHeadersForm != ""))
	add("audit_log", orDefault(c.AuditLog, "all"), given(c.AuditLog != ""))
}

// addLimitsSettings lists the limits: each rule as written, then the
// store (its URL redacted; with Redis its min_replicas_ack,
// replica_ack_timeout and key_prefix), on_store_error and max_keys;
// "limits off" without a block.
func addLimitsSettings(jc *LimitsConfig, serverID string, add func(name, value, source string)) {
	if jc == nil {
		add("limits", "off", "default")
		return
	}
	lc := jc.Domain()
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
	rc := c.RegistrationBlock()
	switch {
	case err != nil && rc.Source != "":
		return rc.Source + " (invalid)"
	case err != nil:
		return "invalid"
	case notEnforced:
		return "off (no upstream: contract not enforced)"
	case src == "file":
		return "file " + rc.File
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
func addIdempotencySettings(ic *IdempotencyConfig, serverID string, add func(name, value, source string)) {
	if ic == nil || ic.Store == "off" {
		return
	}
	for _, d := range []struct {
		name     string
		set, def time.Duration
	}{
		{"ttl", ic.TTL.D(), idempotency.DefaultTTL}, {"lock_ttl", ic.LockTTL.D(), idempotency.DefaultLockTTL},
		{"wait_timeout", ic.WaitTimeout.D(), idempotency.DefaultWaitTimeout},
		{"upstream_timeout", ic.UpstreamTimeout.D(), idempotency.DefaultUpstreamTimeout},
	} {
		v := d.set
		if v == 0 {
			v = d.def
		}
		add("idempotency "+d.name, v.String(), given(d.set != 0))
	}
	add("idempotency actions", strings.Join(append([]string{"job.start"}, ic.Actions...), " "), given(len(ic.Actions) > 0))
	add("idempotency require_idempotency_key", onOff(ic.RequireKey), given(ic.RequireKey))
	l := ic.MemoryLimits().Resolved()
	for _, b := range []struct {
		name   string
		v, set int64
	}{
		{"max_entries", int64(l.MaxEntries), int64(ic.MaxEntries)},
		{"max_entries_per_workspace", int64(l.MaxEntriesPerGroup), int64(ic.MaxEntriesPerWorkspace)},
		{"max_bytes", l.MaxBytes, ic.MaxBytes}, {"max_bytes_per_workspace", l.MaxBytesPerGroup, ic.MaxBytesPerWorkspace},
		{"max_record_bytes", orDefault(ic.MaxRecordBytes, DefaultMaxRecordBytes), ic.MaxRecordBytes},
	} {
		add("idempotency "+b.name, strconv.FormatInt(b.v, 10), given(b.set != 0))
	}
	if ic.Store == idempotency.StoreRedis {
		add("idempotency min_replicas_ack", strconv.Itoa(ic.MinReplicasAck), given(ic.MinReplicasAck != 0))
		add("idempotency replica_ack_timeout", orDefault(ic.ReplicaAckTimeout.D(), idempotency.DefaultReplicaAckTimeout).String(),
			given(ic.ReplicaAckTimeout != 0))
		add("idempotency key_prefix", orDefault(ic.KeyPrefix, idempotency.DefaultRedisKeyPrefix+serverID+":"), given(ic.KeyPrefix != ""))
	}
}

// DefaultMaxRecordBytes is the default bound of a recorded answer: 1 MiB.
const DefaultMaxRecordBytes = 1 << 20

// addRegistrationSettings lists, when registration is on, its refresh
// period and the card versions accepted.
func (c *Config) addRegistrationSettings(add func(name, value, source string)) {
	if src, _, err := c.RegistrationKind(); err != nil || src == "" {
		return
	}
	rc := c.RegistrationBlock()
	add("registration refresh", orDefault(rc.Refresh.D(), registration.DefaultRefreshInterval).String(), given(rc.Refresh != 0))
	def := registration.DefaultAcceptedVersions()
	add("registration a2a_versions", strings.Join(orList(rc.A2AVersions, def.A2A), " "), given(len(rc.A2AVersions) > 0))
	add("registration a2ui_versions", strings.Join(orList(rc.A2UIVersions, def.A2UI), " "), given(len(rc.A2UIVersions) > 0))
}

// orList is l, or def when l is empty.
func orList(l, def []string) []string {
	if len(l) == 0 {
		return def
	}
	return l
}

// introspectionSetting is the introspection in words: "off", or its URL
// redacted, how the sidecar authenticates (bearer, basic or none; never
// the credential) and the covered targets in effect.
func introspectionSetting(ic *IntrospectionConfig) string {
	if ic == nil {
		return "off"
	}
	auth := "none"
	switch {
	case ic.Bearer != "":
		auth = "bearer"
	case ic.ClientID != "":
		auth = "basic"
	}
	actions := ic.Actions
	if len(actions) == 0 {
		actions = introspection.DefaultActions()
	}
	return redact.URL(ic.URL) + " auth " + auth + " actions " + strings.Join(actions, ",")
}

// addReferencesSettings lists the references block in effect: "off"
// without one; else its store (a Redis URL redacted), the bound fields and
// the rules (docs/workspaces.md).
func (c *Config) addReferencesSettings(add func(name, value, source string)) {
	rc := c.References
	if rc == nil {
		add("references", "off", "default")
		return
	}
	e := c.EffectiveReferences()
	if e.Store == "off" {
		add("references", "off", "config")
		return
	}
	store := e.Store
	switch e.Store {
	case "file":
		store += " " + e.FilePath
	case "redis":
		store += " " + redact.URL(e.RedisURL) + " (" + e.RedisMode + ")"
	}
	add("references store", store, given(rc.Store != ""))
	add("references fields", strings.Join(e.Fields, " "), given(len(rc.Fields) > 0))
	add("references data_items", onOff(e.DataItems), given(rc.DataItems != nil))
	add("references learn_from_events", onOff(e.LearnFromEvents), given(rc.LearnFromEvents != nil))
	add("references unknown", e.Unknown, given(rc.Unknown != ""))
	ttl := rc.TTL.D()
	if ttl == 0 {
		ttl = references.DefaultTTL
	}
	add("references ttl", ttl.String(), given(rc.TTL != 0))
	lim := references.Limits{MaxEntries: rc.MaxEntries, MaxPerWorkspace: rc.MaxPerWorkspace}.Resolved()
	add("references max_entries", strconv.Itoa(lim.MaxEntries), given(rc.MaxEntries != 0))
	add("references max_per_workspace", strconv.Itoa(lim.MaxPerWorkspace), given(rc.MaxPerWorkspace != 0))
}
