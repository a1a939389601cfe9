package config

import (
	"strings"
	"testing"
	"time"
)

// TestTableBounds: every bound of the table reads (a min below its max),
// sits on a duration, size or count, and the settings the directive
// reference names as bounded are in the table.
func TestTableBounds(t *testing.T) {
	n := 0
	for _, f := range Fields() {
		if f.Bound == nil {
			continue
		}
		n++
		if f.Kind != KindDuration && f.Kind != KindSize && f.Kind != KindCount {
			t.Errorf("%s: a bound on a %v", f.Name, f.Kind)
		}
		if min, max := f.Bound.Range(); min >= max || max <= 0 {
			t.Errorf("%s: range %d..%d", f.Name, min, max)
		}
	}
	for _, name := range []string{"body_timeout", "workspace_auth leeway", "workspace_auth introspection cache_size",
		"idempotency max_record_bytes", "limits min_replicas_ack", "references ttl", "registration refresh"} {
		if f, ok := FieldNamed(name); !ok || f.Bound == nil {
			t.Errorf("%s: no bound in the table", name)
		}
	}
	if n < 30 {
		t.Errorf("only %d bounded settings", n)
	}
}

// TestConfigValidate: Config.Validate, with no Caddy, refuses each bad
// value with an error naming the setting, and accepts the zero Config (every
// setting at its default) and values at their bounds.
func TestConfigValidate(t *testing.T) {
	neg := Duration(-time.Second)
	bad := []struct {
		name string
		set  func(*Config)
	}{
		{"max_body", func(c *Config) { c.MaxBody = 2 << 40 }},
		{"body_timeout", func(c *Config) { c.BodyTimeout = Duration(time.Millisecond) }},
		{"workspace_auth leeway", func(c *Config) { c.WorkspaceAuth = &WorkspaceAuth{Leeway: &neg} }},
		{"workspace_auth max_token_lifetime", func(c *Config) { c.WorkspaceAuth = &WorkspaceAuth{MaxTokenLifetime: Duration(-time.Hour)} }},
		{"body_memory", func(c *Config) { c.MaxBodyA2A = 100 << 20 }},
		{"server_id", func(c *Config) { c.ServerID = " " }},
		{"agent slug", func(c *Config) { c.Agents = map[string]string{"": "A"} }},
		{"api_key", func(c *Config) { c.APIKeys = []APIKey{{Key: "k"}, {Key: "k"}} }},
		{"other_routes", func(c *Config) { c.OtherRoutes = "open" }},
		{"api_key", func(c *Config) { c.APIKeys = []APIKey{{Key: "k\nx"}} }},
		{"agent", func(c *Config) { c.Agents = map[string]string{"a": "A\r\nX-Injected: 1"} }},
		{"server_id", func(c *Config) { c.ServerID = "srv\nx" }},
		{"idempotency actions", func(c *Config) { c.Idempotency = &IdempotencyConfig{Actions: []string{"job.sync,job.stop"}} }},
		{"idempotency redis_url", func(c *Config) { c.Idempotency = &IdempotencyConfig{Store: "redis"} }},
		{"idempotency lock_ttl upstream_timeout", func(c *Config) {
			c.Idempotency = &IdempotencyConfig{LockTTL: Duration(time.Minute), UpstreamTimeout: Duration(time.Hour)}
		}},
		{"limits block", func(c *Config) { c.Limits = &LimitsConfig{} }},
		{"references ttl", func(c *Config) { c.References = &ReferencesConfig{TTL: Duration(time.Millisecond)} }},
		{"references max_per_workspace", func(c *Config) { c.References = &ReferencesConfig{MaxPerWorkspace: 10_000_001} }},
		{"references max_per_workspace max_entries", func(c *Config) { c.References = &ReferencesConfig{MaxEntries: 10, MaxPerWorkspace: 11} }},
		{"references max_entries", func(c *Config) { c.References = &ReferencesConfig{MaxEntries: 10_000_001} }},
		{"references unknown", func(c *Config) { c.References = &ReferencesConfig{Unknown: "allow"} }},
		{"references store", func(c *Config) { c.References = &ReferencesConfig{Store: "disk"} }},
		{"references fields", func(c *Config) { c.References = &ReferencesConfig{Fields: []string{"job_id", "mission_id"}} }},
		{"references fields twice", func(c *Config) { c.References = &ReferencesConfig{Fields: []string{"job_id", "job_id"}} }},
		{"references store file path", func(c *Config) { c.References = &ReferencesConfig{Store: "file"} }},
		{"references store redis redis_url", func(c *Config) { c.References = &ReferencesConfig{Store: "redis"} }},
		{"references redis_url store", func(c *Config) { c.References = &ReferencesConfig{RedisURL: "redis://127.0.0.1:1"} }},
		{"references file_path store", func(c *Config) { c.References = &ReferencesConfig{Store: "memory", FilePath: "/x"} }},
		{"idempotency actions given twice", func(c *Config) { c.Idempotency = &IdempotencyConfig{Actions: []string{"job.start", "job.start"}} }},
		{"limits rate job.start given twice", func(c *Config) {
			c.Limits = &LimitsConfig{Rate: []RateLimit{{Targets: []string{"job.start", "job.start"}, Rate: "10/m"}}}
		}},
		{"registration a2a_versions given twice", func(c *Config) { c.Registration = &RegistrationConfig{A2AVersions: []string{"0.2.6", "0.2.6"}} }},
		{"limits max_keys", func(c *Config) {
			c.Limits = &LimitsConfig{MaxKeys: -1, Rate: []RateLimit{{Targets: []string{"*"}, Rate: "1/s"}}}
		}},
	}
	for _, b := range bad {
		var c Config
		b.set(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted", b.name)
			continue
		}
		for _, word := range strings.Fields(b.name) {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("%s: %v does not name %q", b.name, err, word)
			}
		}
	}
	zero := Duration(0)
	for name, c := range map[string]Config{
		"defaults":            {},
		"references defaults": {References: &ReferencesConfig{}},
		"references from the idempotency file store": {References: &ReferencesConfig{},
			Idempotency: &IdempotencyConfig{Store: "file", FilePath: "/var/lib/x/idem.db"}},
		"at the bounds": {MaxBody: 1 << 30, MaxBodyA2A: 1 << 30, BodyMemory: 64 << 30, BodyTimeout: Duration(10 * time.Minute),
			WorkspaceAuth: &WorkspaceAuth{Leeway: &zero, JWKSRefresh: Duration(time.Second), MaxTokenLifetime: Duration(30 * 24 * time.Hour)}},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}

// TestEffectiveBodyBounds: an unset bound is max_body when that is set,
// else its default.
func TestEffectiveBodyBounds(t *testing.T) {
	for _, c := range []struct {
		cfg             Config
		body, a2a, data int64
	}{
		{Config{}, DefaultMaxBody, DefaultMaxBodyA2A, DefaultMaxBodyData},
		{Config{MaxBody: 5}, 5, 5, 5},
		{Config{MaxBody: 5, MaxBodyA2A: 7}, 5, 7, 5},
		{Config{MaxBodyData: 9}, DefaultMaxBody, DefaultMaxBodyA2A, 9},
	} {
		if b, a, d := c.cfg.EffectiveBodyBounds(); b != c.body || a != c.a2a || d != c.data {
			t.Errorf("%+v: %d %d %d, want %d %d %d", c.cfg, b, a, d, c.body, c.a2a, c.data)
		}
	}
}
