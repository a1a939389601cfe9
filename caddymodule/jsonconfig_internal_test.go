package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestJSONErrorsNameTheSetting: a JSON config of the wrong type or with an
// unknown member is refused naming the setting as the Caddyfile writes it
// and what it takes, never Go's struct and field types.
func TestJSONErrorsNameTheSetting(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"max_body": "1MiB"}`, "supervaizer_auth max_body takes a whole number, not a JSON string"},
		{`{"local_mode": "yes"}`, "supervaizer_auth local_mode takes true or false, not a JSON string"},
		{`{"workspace_auth": {"cache_size": "many"}}`, "supervaizer_auth workspace_auth cache_size takes a whole number, not a JSON string"},
		{`{"workspace_auth": {"issuer": 5}}`, "supervaizer_auth workspace_auth issuer takes a string, not a JSON number"},
		{`{"api_keys": [{"key": 5}]}`, "supervaizer_auth api_key key takes a string, not a JSON number"},
		{`{"agents": ["a"]}`, "supervaizer_auth agent takes an object, not a JSON array"},
		{`{"max_bodyy": 1}`, `supervaizer_auth: unknown setting "max_bodyy"`},
		{`{"body_timeout": "5x"}`, `supervaizer_auth body_timeout takes a duration ("30s", "5m"; a number is nanoseconds), not "5x"`},
		{`{"workspace_auth": {"leeway": true}}`, `supervaizer_auth workspace_auth leeway takes a duration`},
		{`{"limits": {"rate": [{"targets": ["a"], "rate": "1/s", "burst": "x"}]}}`, "supervaizer_auth limits rate burst takes a whole number"},
	} {
		var h Handler
		err := caddy.StrictUnmarshalJSON([]byte(c.json), &h)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.json, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "int64")) {
			t.Errorf("%s: %v names Go types", c.json, err)
		}
	}
	var h Handler
	if err := caddy.StrictUnmarshalJSON([]byte(`{"max_body": 1024, "body_timeout": "5s", "agents": {"a": "A"}}`), &h); err != nil || h.MaxBody != 1024 || h.Agents["a"] != "A" {
		t.Fatalf("a good config: %v %+v", err, h)
	}
}
