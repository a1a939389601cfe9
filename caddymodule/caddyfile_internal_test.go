package caddymodule

import (
	"encoding/json"
	"github.com/supervaize/supervaizer-sidecar/config"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// caddyfileTestParse parses one supervaizer_auth directive.
func caddyfileTestParse(input string) (Handler, error) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	return h, err
}

// TestCaddyfileParse: each subdirective sets its Handler field, nothing else.
func TestCaddyfileParse(t *testing.T) {
	on, off := true, false
	cases := []struct {
		name  string
		input string
		want  Handler
	}{
		{"empty block", "supervaizer_auth", Handler{}},
		{"server_id", "supervaizer_auth {\n server_id srv-1\n}", Handler{Config: config.Config{ServerID: "srv-1"}}},
		{"api_key default scope and read", "supervaizer_auth {\n api_key k1\n api_key k2 read\n api_key k3 write\n}",
			Handler{Config: config.Config{APIKeys: []config.APIKey{{Key: "k1", Scope: "write"}, {Key: "k2", Scope: "read"}, {Key: "k3", Scope: "write"}}}}},
		{"agents", "supervaizer_auth {\n agent a\n agent b id-b\n}", Handler{Config: config.Config{Agents: map[string]string{"a": "", "b": "id-b"}}}},
		{"switches", "supervaizer_auth {\n local_mode on\n forward_token off\n verified_headers no\n events_require_workspace_token yes\n events_fanout 1\n}",
			Handler{Config: config.Config{LocalMode: &on, ForwardToken: &off, VerifiedHeaders: &off, EventsRequireWorkspaceToken: true, EventsFanout: true}}},
		{"verified_headers compact", "supervaizer_auth {\n verified_headers compact\n}",
			Handler{Config: config.Config{VerifiedHeaders: &on, VerifiedHeadersForm: "compact"}}},
		{"verified_headers on", "supervaizer_auth {\n verified_headers on\n}", Handler{Config: config.Config{VerifiedHeaders: &on}}},
		{"body bounds", "supervaizer_auth {\n max_body 4KiB\n max_body_a2a 1MiB\n max_body_data 2MB\n body_timeout 3s\n}",
			Handler{Config: config.Config{MaxBody: 4096, MaxBodyA2A: 1 << 20, MaxBodyData: 2_000_000, BodyTimeout: config.Duration(3 * time.Second)}}},
		{"route policy", "supervaizer_auth {\n audit_log deny\n legacy_routes deny\n other_routes api_key\n upstream http://127.0.0.1:8000\n}",
			Handler{Config: config.Config{AuditLog: "deny", LegacyRoutes: "deny", OtherRoutes: "api_key", Upstream: "http://127.0.0.1:8000"}}},
		{"workspace_auth", "supervaizer_auth {\n workspace_auth {\n  required on\n  issuer https://studio.test\n  audience aud\n  jwks_url https://studio.test/jwks.json\n  leeway 0\n  jwks_refresh 1m\n  jwks_unknown_kid_interval 10s\n  jwks_timeout 2s\n  jwks_max_stale 1h\n  max_token_lifetime 15m\n  cache_size 5\n }\n}",
			Handler{Config: config.Config{WorkspaceAuth: &config.WorkspaceAuth{Required: &on, Issuer: "https://studio.test", Audience: "aud",
				JWKSURL: "https://studio.test/jwks.json", Leeway: new(config.Duration(0)), JWKSRefresh: config.Duration(time.Minute),
				JWKSUnknownKIDInterval: config.Duration(10 * time.Second), JWKSTimeout: config.Duration(2 * time.Second),
				JWKSMaxStale: config.Duration(time.Hour), MaxTokenLifetime: config.Duration(15 * time.Minute), CacheSize: 5}}}},
		{"workspace_auth leeway in seconds, public_key", "supervaizer_auth {\n workspace_auth {\n  public_key /k.pem\n  leeway 45\n }\n}",
			Handler{Config: config.Config{WorkspaceAuth: &config.WorkspaceAuth{PublicKey: "/k.pem", Leeway: new(config.Duration(45 * time.Second))}}}},
		{"registration file", "supervaizer_auth {\n registration file /r.json {\n  refresh 30s\n  a2a_versions 0.2.6 0.3.0\n  a2ui_versions v0.8\n }\n}",
			Handler{Config: config.Config{Registration: &config.RegistrationConfig{Source: "file", File: "/r.json", Refresh: config.Duration(30 * time.Second),
				A2AVersions: []string{"0.2.6", "0.3.0"}, A2UIVersions: []string{"v0.8"}}}}},
		{"registration off", "supervaizer_auth {\n registration off\n}", Handler{Config: config.Config{Registration: &config.RegistrationConfig{Source: "off"}}}},
		{"idempotency off", "supervaizer_auth {\n idempotency off\n}", Handler{Config: config.Config{Idempotency: &config.IdempotencyConfig{Store: "off"}}}},
		{"idempotency file", "supervaizer_auth {\n idempotency {\n  store file /idem.db\n  ttl 1h\n  actions a.b c.d\n  require_idempotency_key on\n  max_entries 10\n  max_bytes 1KiB\n }\n}",
			Handler{Config: config.Config{Idempotency: &config.IdempotencyConfig{Store: "file", FilePath: "/idem.db", TTL: config.Duration(time.Hour),
				Actions: []string{"a.b", "c.d"}, RequireKey: true, MaxEntries: 10, MaxBytes: 1024}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := caddyfileTestParse(c.input)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(c.want)
				t.Fatalf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// TestCaddyfileParseErrors: a bad line is refused with a message naming the
// option and the line it is on.
func TestCaddyfileParseErrors(t *testing.T) {
	cases := []struct{ input, want string }{
		{"supervaizer_auth extra", "wrong argument count"},
		{"supervaizer_auth {\n bogus 1\n}", `unrecognized supervaizer_auth option "bogus", at Testfile:2`},
		{"supervaizer_auth {\n server_id\n}", "server_id takes exactly one argument, at Testfile:2"},
		{"supervaizer_auth {\n server_id a b\n}", "server_id takes exactly one argument, at Testfile:2"},
		{"supervaizer_auth {\n api_key\n}", "api_key takes <key> [read|write], at Testfile:2"},
		{"supervaizer_auth {\n server_id s\n api_key k admin\n}", `api_key scope must be read or write, not "admin", at Testfile:3`},
		{"supervaizer_auth {\n agent a\n agent a id\n}", `agent "a" is configured twice, at Testfile:3`},
		{"supervaizer_auth {\n local_mode maybe\n}", `local_mode must be on or off, not "maybe", at Testfile:2`},
		{"supervaizer_auth {\n verified_headers\n}", `verified_headers takes exactly one argument, at Testfile:2`},
		{"supervaizer_auth {\n verified_headers compact yes\n}", `verified_headers takes exactly one argument, at Testfile:2`},
		{"supervaizer_auth {\n verified_headers some\n}", `verified_headers must be on, off or compact, not "some", at Testfile:2`},
		{"supervaizer_auth {\n verified_headers maybe\n}", `verified_headers must be on, off or compact, not "maybe", at Testfile:2`},
		{"supervaizer_auth {\n max_body 0\n}", `max_body: 0 is not a size it takes: leave it out for the default, at Testfile:2`},
		{"supervaizer_auth {\n max_body_a2a lots\n}", `max_body_a2a: bad size "lots" (a number of bytes, e.g. 1048576, 16MiB or 4KB), at Testfile:2`},
		{"supervaizer_auth {\n body_timeout soon\n}", `body_timeout: bad duration "soon" (e.g. 30s, 5m, 1h30m), at Testfile:2`},
		{"supervaizer_auth {\n body_timeout 0s\n}", `body_timeout: 0 is not a duration it takes: leave it out for the default, at Testfile:2`},
		{"supervaizer_auth {\n workspace_auth {\n  leeway 5x\n }\n}", `leeway: bad duration "5x" (e.g. 30s, 5m, 1h30m), at Testfile:3`},
		{"supervaizer_auth {\n workspace_auth {\n  cache_size many\n }\n}", `cache_size: bad number "many" (a whole number), at Testfile:3`},
		{"supervaizer_auth {\n idempotency {\n  max_record_bytes -1\n }\n}", `idempotency max_record_bytes: bad size "-1" (a number of bytes, e.g. 1048576, 16MiB or 4KB), at Testfile:3`},
		{"supervaizer_auth {\n workspace_auth {\n\n  nope x\n }\n}", `unrecognized workspace_auth option "nope", at Testfile:4`},
		{"supervaizer_auth {\n registration maybe\n}", "registration takes from_upstream, off, or file <path>, at Testfile:2"},
		{"supervaizer_auth {\n registration off {\n  every 1s\n }\n}", `unrecognized registration option "every", at Testfile:3`},
		{"supervaizer_auth {\n idempotency on\n}", "idempotency takes no argument but off, at Testfile:2"},
		{"supervaizer_auth {\n idempotency {\n  store file\n }\n}", "store takes memory, redis, off, or file <path>, at Testfile:3"},
		{"supervaizer_auth {\n idempotency {\n  max_entries ten\n }\n}", `idempotency max_entries: bad number "ten" (a whole number), at Testfile:3`},
	}
	for _, c := range cases {
		_, err := caddyfileTestParse(c.input)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.input, err, c.want)
		}
	}
}
