package gate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/limits"
)

// TestSettingBoundsListed: every bounded value of a config has a bound, and
// every bound is checked.
func TestSettingBoundsListed(t *testing.T) {
	c := Config{Auth: AuthConfig{Leeway: new(time.Duration(0)), Introspection: &IntrospectionConfig{}},
		Idempotency: &IdempotencyConfig{}, Limits: &limits.Config{}, References: &ReferencesConfig{}}
	var names []string
	for _, bv := range c.boundedValues() {
		if _, ok := settingBounds[bv.name]; !ok {
			t.Errorf("%s has no bound", bv.name)
		}
		names = append(names, bv.name)
	}
	for name := range settingBounds {
		if !slices.Contains(names, name) {
			t.Errorf("bound %s is never checked", name)
		}
	}
}

// TestConfigValidate: Config.Validate, with no Caddy, refuses each bad
// value with an error naming the setting, and accepts the zero Config (every
// setting at its default) and values at their bounds.
func TestConfigValidate(t *testing.T) {
	neg := -time.Second
	bad := []struct {
		name string
		set  func(*Config)
	}{
		{"max_body", func(c *Config) { c.MaxBody = 2 << 40 }},
		{"body_timeout", func(c *Config) { c.BodyTimeout = time.Millisecond }},
		{"workspace_auth leeway", func(c *Config) { c.Auth.Leeway = &neg }},
		{"workspace_auth max_token_lifetime", func(c *Config) { c.Auth.MaxTokenLifetime = -time.Hour }},
		{"body_memory", func(c *Config) { c.MaxBodyA2A = 100 << 20 }},
		{"server_id", func(c *Config) { c.ServerID = " " }},
		{"agent slug", func(c *Config) { c.Agents = map[string]string{"": "A"} }},
		{"api_key", func(c *Config) { c.APIKeys = []ConfigKey{{Key: "k"}, {Key: "k"}} }},
		{"other_routes", func(c *Config) { c.OtherRoutes = "open" }},
		{"api_key", func(c *Config) { c.APIKeys = []ConfigKey{{Key: "k\nx"}} }},
		{"agent", func(c *Config) { c.Agents = map[string]string{"a": "A\r\nX-Injected: 1"} }},
		{"server_id", func(c *Config) { c.ServerID = "srv\nx" }},
		{"idempotency actions", func(c *Config) { c.Idempotency = &IdempotencyConfig{Actions: []string{"job.sync,job.stop"}} }},
		{"idempotency redis_url", func(c *Config) { c.Idempotency = &IdempotencyConfig{Store: "redis"} }},
		{"idempotency lock_ttl upstream_timeout", func(c *Config) {
			c.Idempotency = &IdempotencyConfig{LockTTL: time.Minute, UpstreamTimeout: time.Hour}
		}},
		{"limits block", func(c *Config) { c.Limits = &limits.Config{} }},
		{"references ttl", func(c *Config) { c.References = &ReferencesConfig{TTL: time.Millisecond} }},
		{"references max_per_workspace", func(c *Config) { c.References = &ReferencesConfig{MaxPerWorkspace: 10_000_001} }},
		{"references unknown", func(c *Config) { c.References = &ReferencesConfig{Unknown: "allow"} }},
		{"references store", func(c *Config) { c.References = &ReferencesConfig{Store: "disk"} }},
		{"references fields", func(c *Config) { c.References = &ReferencesConfig{Fields: []string{"job_id", "mission_id"}} }},
		{"references fields twice", func(c *Config) { c.References = &ReferencesConfig{Fields: []string{"job_id", "job_id"}} }},
		{"references store file path", func(c *Config) { c.References = &ReferencesConfig{Store: "file"} }},
		{"references store redis redis_url", func(c *Config) { c.References = &ReferencesConfig{Store: "redis"} }},
		{"references redis_url store", func(c *Config) { c.References = &ReferencesConfig{RedisURL: "redis://127.0.0.1:1"} }},
		{"references file_path store", func(c *Config) { c.References = &ReferencesConfig{Store: "memory", FilePath: "/x"} }},
		{"limits max_keys", func(c *Config) {
			c.Limits = &limits.Config{MaxKeys: -1, Rate: []limits.RateConfig{{Targets: []string{"*"}, Rate: "1/s"}}}
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
	zero := time.Duration(0)
	for name, c := range map[string]Config{
		"defaults":            {},
		"references defaults": {References: &ReferencesConfig{}},
		"references from the idempotency file store": {References: &ReferencesConfig{},
			Idempotency: &IdempotencyConfig{Store: "file", FilePath: "/var/lib/x/idem.db"}},
		"at the bounds": {MaxBody: 1 << 30, MaxBodyA2A: 1 << 30, BodyMemory: 64 << 30, BodyTimeout: 10 * time.Minute,
			Auth: AuthConfig{Leeway: &zero, JWKSRefresh: time.Second, MaxTokenLifetime: 30 * 24 * time.Hour}},
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
