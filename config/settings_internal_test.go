package config

import (
	"slices"
	"testing"
)

// TestEffectiveSettingsListEveryField: the effective settings (`supervaizer
// check`, /_sidecar/status) show every setting of the table, under its own
// name or within the line shownWithin names, so that a setting added to
// the table and not to the display fails here.
func TestEffectiveSettingsListEveryField(t *testing.T) {
	on := true
	c := &Config{ServerID: "srv-1", APIKeys: []APIKey{{Key: "k"}}, Agents: map[string]string{"a": "A"},
		Upstream: "http://127.0.0.1:8000", WorkspaceAuth: &WorkspaceAuth{Required: &on, Issuer: "https://s.test",
			JWKSURL: "https://s.test/jwks", PublicKey: "/k.pem", Introspection: &IntrospectionConfig{URL: "https://s.test/i"}},
		Registration: &RegistrationConfig{Source: "from_upstream"},
		Idempotency:  &IdempotencyConfig{Store: "redis", RedisURL: "redis://127.0.0.1:1/0", MaxEntries: 10},
		Limits: &LimitsConfig{Store: "redis", RedisURL: "redis://127.0.0.1:1/0",
			Rate: []RateLimit{{Targets: []string{"job.start"}, Rate: "1/s"}}},
		References: &ReferencesConfig{}}
	r, _ := c.Resolve(nopLog())
	var shown []string
	for _, s := range c.Settings(r) {
		shown = append(shown, s.Name)
	}
	for _, f := range Fields() {
		if f.Kind == KindBlock {
			continue // its settings are checked
		}
		name := f.Name
		if within, ok := shownWithin[name]; ok {
			name = within
		}
		if !slices.Contains(shown, name) {
			t.Errorf("%s is not among the effective settings %q", f.Name, shown)
		}
	}
}
