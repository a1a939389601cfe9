package caddymodule

import (
	"strings"
	"testing"
)

// TestRegistrationErrorPrefixedOnce: a contract source registration/
// refuses is reported with each prefix once ("supervaizer_auth:
// registration: ..."), not "registration: registration: ...", from a
// Caddyfile and from JSON alike.
func TestRegistrationErrorPrefixedOnce(t *testing.T) {
	clearSupervaizerEnv(t)
	// A query in the upstream URL: registration/ refuses it, Validate does not.
	c := doorCase{caddyfile: "upstream http://127.0.0.1:9/?q=1\nagent a", json: `"upstream": "http://127.0.0.1:9/?q=1", "agents": {"a": ""}`}
	for door, load := range doors {
		err := load(c)
		if err == nil {
			t.Errorf("%s: an upstream URL with a query accepted", door)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `supervaizer_auth: registration: upstream base URL`) || strings.Contains(msg, "registration: registration:") {
			t.Errorf("%s: %q, want the registration prefix once", door, msg)
		}
	}
}
