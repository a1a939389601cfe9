package config

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestRecordOverShareWarns: start-up warns, naming both settings, when
// max_record_bytes is above a workspace's share of the recorded bytes
// (given or default: max_bytes/8), and says nothing when it fits or when
// idempotency is off.
func TestRecordOverShareWarns(t *testing.T) {
	for _, c := range []struct {
		ic   *IdempotencyConfig
		warn bool
	}{
		{nil, false},
		{&IdempotencyConfig{}, false}, // 1 MiB of a default share of 8 MiB
		{&IdempotencyConfig{MaxRecordBytes: 16 << 20}, true},
		{&IdempotencyConfig{MaxBytes: 4 << 20}, true}, // a share of 512 KiB
		{&IdempotencyConfig{MaxBytesPerWorkspace: 1 << 20}, false},
		{&IdempotencyConfig{MaxBytesPerWorkspace: 1<<20 - 1}, true},
		{&IdempotencyConfig{Store: "redis", RedisURL: "redis://127.0.0.1:1", MaxRecordBytes: 9 << 20}, true},
		{&IdempotencyConfig{Store: "off", MaxRecordBytes: 16 << 20}, false},
	} {
		core, logs := observer.New(zap.WarnLevel)
		cfg := &Config{Idempotency: c.ic}
		cfg.StartupChecks(&Resolved{}, zap.New(core))
		got := logs.FilterMessageSnippet("is above").All()
		switch {
		case c.warn && len(got) != 1:
			t.Errorf("%+v: no warning in %v", c.ic, logs.All())
		case c.warn && (!strings.Contains(got[0].Message, "max_bytes_per_workspace") || !strings.Contains(got[0].Message, "max_record_bytes")):
			t.Errorf("%+v: %q does not name both settings", c.ic, got[0].Message)
		case !c.warn && len(got) != 0:
			t.Errorf("%+v: warned %q", c.ic, got[0].Message)
		}
	}
}

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
