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
	c := doorCase{caddyfile: "upstream http://127.0.0.1:9\nagent a\\b", json: `"upstream": "http://127.0.0.1:9", "agents": {"a\\b": ""}`}
	for door, load := range map[string]func(doorCase) error{"caddyfile": loadCaddyfileDoor, "json": loadJSONDoor} {
		err := load(c)
		if err == nil {
			t.Errorf("%s: a slug with a backslash accepted", door)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `supervaizer_auth: registration: agent slug "a\\b" contains`) || strings.Contains(msg, "registration: registration:") {
			t.Errorf("%s: %q, want the registration prefix once", door, msg)
		}
	}
}
