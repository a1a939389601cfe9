package caddymodule

import (
	"regexp"
	"strings"
	"testing"
)

// repeatedOnce are Caddyfile lines that give a single-valued directive or
// block twice, at every level: the directive the error must name, and the
// lines (in a supervaizer_auth block whose base sets server_id, local_mode
// and api_key).
var repeatedOnce = []struct{ directive, lines string }{
	{"other_routes", "other_routes deny\nother_routes public"},
	{"verified_headers", "verified_headers compact\nverified_headers on"},
	{"max_body", "max_body 1KiB\nmax_body 2KiB"},
	{"upstream", "upstream http://127.0.0.1:9\nupstream http://127.0.0.1:10"},
	{"limits", "limits {\nrate job.start 10/m\n}\nlimits {\nconcurrency job.start 1\n}"},
	{"idempotency", "idempotency {\nttl 1h\n}\nidempotency off"},
	{"registration", "registration off\nregistration off"},
	{"workspace_auth", "workspace_auth {\nrequired off\n}\nworkspace_auth {\nrequired on\n}"},
	{"idempotency ttl", "idempotency {\nttl 1h\nttl 2h\n}"},
	{"idempotency store", "idempotency {\nstore memory\nstore off\n}"},
	{"limits max_keys", "limits {\nrate job.start 10/m\nmax_keys 5\nmax_keys 6\n}"},
	{"limits on_store_error", "limits {\nrate job.start 10/m\non_store_error deny\non_store_error local\n}"},
	{"workspace_auth issuer", "workspace_auth {\nissuer https://a.test\nissuer https://b.test\n}"},
	{"registration refresh", "registration off {\nrefresh 1m\nrefresh 2m\n}"},
	{"introspection url", "workspace_auth {\nintrospection {\nurl https://a.test/i\nurl https://b.test/i\n}\n}"},
}

// TestCaddyfileRepeatRefused: a second line of a single-valued directive
// or block, at any level, is refused at its line (adapted and provisioned
// as Caddy does), naming the directive: the last one would silently win.
func TestCaddyfileRepeatRefused(t *testing.T) {
	clearSupervaizerEnv(t)
	at := regexp.MustCompile(`at Caddyfile:\d+`)
	for _, c := range repeatedOnce {
		err := loadCaddyfileDoor(doorCase{caddyfile: c.lines})
		if err == nil {
			t.Errorf("%q: accepted, want refused", c.lines)
			continue
		}
		msg := err.Error()
		for _, word := range strings.Fields(c.directive) {
			if !strings.Contains(msg, word) {
				t.Errorf("%q: %v, does not name %q", c.lines, err, word)
			}
		}
		if !strings.Contains(msg, "given twice") || !at.MatchString(msg) {
			t.Errorf("%q: %v, want given twice, at its line", c.lines, err)
		}
	}
}

// TestCaddyfileRepeatableLines: the lines that add to each other stay
// repeatable: api_key, agent (each slug once), the limits rules, the
// covered actions of idempotency and introspection.
func TestCaddyfileRepeatableLines(t *testing.T) {
	clearSupervaizerEnv(t)
	for _, lines := range []string{
		"api_key k2 read\napi_key k3",
		"agent a\nagent b id-b",
		"limits {\nrate job.start 10/m\nrate job.sync 5/m\nconcurrency job.start 1\nconcurrency job.sync 2\n}",
		"idempotency {\nactions job.sync\nactions job.stop\n}",
	} {
		if err := loadCaddyfileDoor(doorCase{caddyfile: lines}); err != nil {
			t.Errorf("%q: refused: %v", lines, err)
		}
	}
	h, err := caddyfileTestParse("supervaizer_auth {\n idempotency {\n  actions a.b\n  actions c.d\n }\n" +
		" workspace_auth {\n  introspection {\n   url https://s.test/i\n   actions a.b\n   actions c.d\n  }\n }\n}")
	if err != nil || len(h.Idempotency.Actions) != 2 || len(h.WorkspaceAuth.Introspection.Actions) != 2 {
		t.Fatalf("two actions lines: %v, %+v", err, h)
	}
}
