package config

import (
	"strings"
	"testing"
)

// TestPlainHTTPURLs: a JWKS or introspection URL over plain http to a host
// that is not loopback is named (redacted); https and loopback are not.
// Nothing is fetched.
func TestPlainHTTPURLs(t *testing.T) {
	for _, c := range []struct {
		jwks, introspection string
		want                []string
	}{
		{"https://studio.example/jwks.json", "https://studio.example/introspect", nil},
		{"http://127.0.0.1:8081/jwks.json", "http://localhost:9/introspect", nil},
		{"http://[::1]:8081/jwks.json", "", nil},
		{"http://studio.example/jwks.json?sig=secret", "", []string{"workspace_auth jwks_url http://studio.example/jwks.json?sig=REDACTED"}},
		{"", "HTTP://user:pw@studio.example/introspect", []string{"workspace_auth introspection url"}},
	} {
		cfg := &Config{}
		if c.introspection != "" {
			cfg.WorkspaceAuth = &WorkspaceAuth{Introspection: &IntrospectionConfig{URL: c.introspection}}
		}
		got := cfg.plainHTTPURLs(&ResolvedAuth{JWKSURL: c.jwks})
		if len(got) != len(c.want) {
			t.Errorf("%q %q: %q, want %q", c.jwks, c.introspection, got, c.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) || strings.Contains(got[i], "pw") || strings.Contains(got[i], "secret") {
				t.Errorf("%q %q: %q, want %q (redacted)", c.jwks, c.introspection, got[i], c.want[i])
			}
		}
	}
}
