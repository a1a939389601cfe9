package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile" // the caddyfile adapter
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// doorCase is one setting's value written both ways: the lines of a
// supervaizer_auth block, and the same as the handler's JSON members.
type doorCase struct {
	setting   string // what the error must name (each word)
	caddyfile string
	json      string
}

// badSettings are, for every bounded or worded setting, values that break a
// bound or an invariant: negative, past the bound, below a minimum, an
// empty name or id, a blank server id, an unknown word, two settings that
// contradict each other.
var badSettings = []doorCase{
	{"max_body", "max_body -1", `"max_body": -1`},
	{"max_body", "max_body 2TiB", `"max_body": 2199023255552`},
	{"max_body_a2a", "max_body_a2a 2GiB", `"max_body_a2a": 2147483648`},
	{"max_body_data", "max_body_data 1.5GiB", `"max_body_data": 1610612736`},
	{"body_memory", "body_memory 65GiB", `"body_memory": 69793218560`},
	{"body_memory max_body_a2a", "body_memory 1MiB", `"body_memory": 1048576`},
	{"body_timeout", "body_timeout -1s", `"body_timeout": -1000000000`},
	{"body_timeout", "body_timeout 11m", `"body_timeout": 660000000000`},
	{"body_timeout", "body_timeout 1ns", `"body_timeout": 1`},
	{"body_timeout", "body_timeout 999ms", `"body_timeout": 999000000`},
	{"body_memory max_body_a2a default", "max_body_a2a 100MiB", `"max_body_a2a": 104857600`},
	{"body_memory max_body_a2a default", "max_body_a2a 33MiB", `"max_body_a2a": 34603008`},
	{"body_memory max_body_a2a default", "max_body 65MiB", `"max_body": 68157440`},
	{"body_memory max_body_a2a", "max_body_a2a 100MiB\nbody_memory 99MiB", `"max_body_a2a": 104857600, "body_memory": 103809024`},
	{"server_id", `server_id " "`, `"server_id": " "`},
	{"agent slug", `agent ""`, `"agents": {"": "A"}`},
	{"api_key", "api_key k2 read\napi_key k2 write", `"api_keys": [{"key": "k"}, {"key": "k2", "scope": "read"}, {"key": "k2"}]`},
	{"api_key", "api_key k", `"api_keys": [{"key": "k"}, {"key": "k"}]`},
	{"api_key scope", "api_key k3 admin", `"api_keys": [{"key": "k"}, {"key": "k3", "scope": "admin"}]`},
	{"verified_headers", "verified_headers maybe", `"verified_headers_form": "maybe"`},
	{"legacy_routes", "legacy_routes maybe", `"legacy_routes": "maybe"`},
	{"other_routes", "other_routes open", `"other_routes": "open"`},
	{"audit_log", "audit_log some", `"audit_log": "some"`},

	{"workspace_auth leeway", "workspace_auth {\nleeway -5\n}", `"workspace_auth": {"leeway": -5000000000}`},
	{"workspace_auth leeway", "workspace_auth {\nleeway 100000h\n}", `"workspace_auth": {"leeway": 360000000000000000}`},
	{"workspace_auth leeway", "workspace_auth {\nleeway 301\n}", `"workspace_auth": {"leeway": 301000000000}`},
	{"workspace_auth jwks_refresh", "workspace_auth {\njwks_refresh 1ns\n}", `"workspace_auth": {"jwks_refresh": 1}`},
	{"workspace_auth jwks_refresh", "workspace_auth {\njwks_refresh -1m\n}", `"workspace_auth": {"jwks_refresh": -60000000000}`},
	{"workspace_auth jwks_refresh", "workspace_auth {\njwks_refresh 25h\n}", `"workspace_auth": {"jwks_refresh": 90000000000000}`},
	{"workspace_auth jwks_unknown_kid_interval", "workspace_auth {\njwks_unknown_kid_interval 1ms\n}", `"workspace_auth": {"jwks_unknown_kid_interval": 1000000}`},
	{"workspace_auth jwks_timeout", "workspace_auth {\njwks_timeout 2m\n}", `"workspace_auth": {"jwks_timeout": 120000000000}`},
	{"workspace_auth jwks_max_stale", "workspace_auth {\njwks_max_stale -1s\n}", `"workspace_auth": {"jwks_max_stale": -1000000000}`},
	{"workspace_auth max_token_lifetime", "workspace_auth {\nmax_token_lifetime -1m\n}", `"workspace_auth": {"max_token_lifetime": -60000000000}`},
	{"workspace_auth max_token_lifetime", "workspace_auth {\nmax_token_lifetime 31d\n}", `"workspace_auth": {"max_token_lifetime": 2678400000000000}`},
	{"workspace_auth cache_size", "workspace_auth {\ncache_size -1\n}", `"workspace_auth": {"cache_size": -1}`},
	{"workspace_auth cache_size", "workspace_auth {\ncache_size 20000000\n}", `"workspace_auth": {"cache_size": 20000000}`},
	{"introspection timeout", "workspace_auth {\nintrospection {\nurl https://s.test/i\ntimeout 2m\n}\n}",
		`"workspace_auth": {"introspection": {"url": "https://s.test/i", "timeout": 120000000000}}`},
	{"introspection cache_ttl", "workspace_auth {\nintrospection {\nurl https://s.test/i\ncache_ttl -1s\n}\n}",
		`"workspace_auth": {"introspection": {"url": "https://s.test/i", "cache_ttl": -1000000000}}`},
	{"introspection negative_cache_ttl", "workspace_auth {\nintrospection {\nurl https://s.test/i\nnegative_cache_ttl 2h\n}\n}",
		`"workspace_auth": {"introspection": {"url": "https://s.test/i", "negative_cache_ttl": 7200000000000}}`},
	{"introspection cache_size", "workspace_auth {\nintrospection {\nurl https://s.test/i\ncache_size -1\n}\n}",
		`"workspace_auth": {"introspection": {"url": "https://s.test/i", "cache_size": -1}}`},

	{"registration refresh", "registration off {\nrefresh 1ns\n}", `"registration": {"source": "off", "refresh": 1}`},
	{"registration refresh", "registration off {\nrefresh 25h\n}", `"registration": {"source": "off", "refresh": 90000000000000}`},
	{"registration", "registration maybe", `"registration": {"source": "maybe"}`},

	{"idempotency ttl", "idempotency {\nttl 8d\n}", `"idempotency": {"ttl": 691200000000000}`},
	{"idempotency ttl lock_ttl", "idempotency {\nttl 1m\n}", `"idempotency": {"ttl": 60000000000}`},
	{"idempotency lock_ttl upstream_timeout", "idempotency {\nlock_ttl 30s\n}", `"idempotency": {"lock_ttl": 30000000000}`},
	{"idempotency lock_ttl", "idempotency {\nlock_ttl -1s\n}", `"idempotency": {"lock_ttl": -1000000000}`},
	{"idempotency wait_timeout", "idempotency {\nwait_timeout 11m\n}", `"idempotency": {"wait_timeout": 660000000000}`},
	{"idempotency upstream_timeout", "idempotency {\nupstream_timeout -1s\n}", `"idempotency": {"upstream_timeout": -1000000000}`},
	{"idempotency max_entries", "idempotency {\nmax_entries -1\n}", `"idempotency": {"max_entries": -1}`},
	{"idempotency max_entries_per_workspace max_entries", "idempotency {\nmax_entries 100\nmax_entries_per_workspace 101\n}",
		`"idempotency": {"max_entries": 100, "max_entries_per_workspace": 101}`},
	{"idempotency max_bytes_per_workspace max_bytes", "idempotency {\nmax_bytes_per_workspace 65MiB\n}",
		`"idempotency": {"max_bytes_per_workspace": 68157440}`},
	{"idempotency max_bytes", "idempotency {\nmax_bytes 65GiB\n}", `"idempotency": {"max_bytes": 69793218560}`},
	{"idempotency max_record_bytes", "idempotency {\nmax_record_bytes -1\n}", `"idempotency": {"max_record_bytes": -1}`},
	{"idempotency max_record_bytes", "idempotency {\nmax_record_bytes 2GiB\n}", `"idempotency": {"max_record_bytes": 2147483648}`},
	{"idempotency redis_url store", "idempotency {\nredis_url redis://127.0.0.1:6379/0\n}", `"idempotency": {"redis_url": "redis://127.0.0.1:6379/0"}`},
	{"idempotency min_replicas_ack store", "idempotency {\nmin_replicas_ack 1\n}", `"idempotency": {"min_replicas_ack": 1}`},
	{"idempotency redis_mode store", "idempotency {\nstore file /tmp/x.db\nredis_mode sentinel\n}",
		`"idempotency": {"store": "file", "file_path": "/tmp/x.db", "redis_mode": "sentinel"}`},
	{"idempotency min_replicas_ack", "idempotency {\nstore redis\nmin_replicas_ack 17\n}", `"idempotency": {"store": "redis", "min_replicas_ack": 17}`},
	{"idempotency replica_ack_timeout", "idempotency {\nstore redis\nreplica_ack_timeout 2m\n}", `"idempotency": {"store": "redis", "replica_ack_timeout": 120000000000}`},
	{"idempotency store", "idempotency {\nstore bogus\n}", `"idempotency": {"store": "bogus"}`},
	// Keys, slugs and ids that no request could match.
	{"api_key", "api_key \" k2 \"", `"api_keys": [{"key": "k"}, {"key": " k2 "}]`},
	{"agent slug path segment", "agent a/b", `"agents": {"a/b": ""}`},
	{"agent slug path segment", "agent a?b", `"agents": {"a?b": ""}`},
	{"agent slug path segment", "agent a#b", `"agents": {"a#b": ""}`},
	{"agent slug path segment", "agent a\\b", `"agents": {"a\\b": ""}`},
	{"server_id space", `server_id "a b"`, `"server_id": "a b"`},
	{"server_id space", "server_id \"a\tb\"", `"server_id": "a\tb"`},
	{"server_id space", "server_id \"a\u00a0b\"", `"server_id": "a\u00a0b"`},
	// Two rules of one text would share one budget, charged twice.
	{"limits rate job.start given twice", "limits {\nrate job.start 5/m\nrate job.start 5/m burst 5\n}",
		`"limits": {"rate": [{"targets": ["job.start"], "rate": "5/m"}, {"targets": ["job.start"], "rate": "5/m", "burst": 5}]}`},
	{"limits concurrency job.sync given twice", "limits {\nconcurrency job.sync 1\nconcurrency job.sync 1\n}",
		`"limits": {"concurrency": [{"targets": ["job.sync"], "max": 1}, {"targets": ["job.sync"], "max": 1}]}`},
	// A value given twice in one list (nothing is given twice).
	{"idempotency actions job.start given twice", "idempotency {\nactions job.start job.start\n}", `"idempotency": {"actions": ["job.start", "job.start"]}`},
	{"idempotency actions job.sync given twice", "idempotency {\nactions job.sync\nactions job.sync\n}", `"idempotency": {"actions": ["job.sync", "job.sync"]}`},
	{"limits rate job.start given twice", "limits {\nrate job.start job.start 10/m\n}",
		`"limits": {"rate": [{"targets": ["job.start", "job.start"], "rate": "10/m"}]}`},
	{"limits concurrency job.sync given twice", "limits {\nconcurrency job.sync job.* job.sync 2\n}",
		`"limits": {"concurrency": [{"targets": ["job.sync", "job.*", "job.sync"], "max": 2}]}`},
	{"introspection actions job.start given twice", "workspace_auth {\nintrospection {\nurl https://s.test/i\nactions job.start job.start\n}\n}",
		`"workspace_auth": {"introspection": {"url": "https://s.test/i", "actions": ["job.start", "job.start"]}}`},
	// The guard's durations have a floor of 1s (a JSON number is nanoseconds).
	{"idempotency lock_ttl must be at least 1s", "idempotency {\nlock_ttl 2ms\nupstream_timeout 1ms\n}", `"idempotency": {"lock_ttl": 2000000, "upstream_timeout": 1000000}`},
	{"idempotency upstream_timeout must be at least 1s", "idempotency {\nupstream_timeout 1ns\n}", `"idempotency": {"upstream_timeout": 1}`},
	{"idempotency wait_timeout must be at least 1s", "idempotency {\nwait_timeout 1ns\n}", `"idempotency": {"wait_timeout": 1}`},
	{"idempotency wait_timeout must be at least 1s", "idempotency {\nwait_timeout 999ms\n}", `"idempotency": {"wait_timeout": 999000000}`},
	{"idempotency ttl must be at least 1s", "idempotency {\nttl 2ms\nlock_ttl 2ms\nupstream_timeout 1ms\n}", `"idempotency": {"ttl": 2000000, "lock_ttl": 2000000, "upstream_timeout": 1000000}`},
	{"agent", "agent \"bad slug\"", `"agents": {"bad slug": ""}`},
	{"agent", "agent a \"id with space\"", `"agents": {"a": "id with space"}`},
	// Covered actions are exact action names: a comma list, a pattern or a
	// blank would cover nothing.
	{"idempotency actions", "idempotency {\nactions job.sync,artifact.get\n}", `"idempotency": {"actions": ["job.sync,artifact.get"]}`},
	{"idempotency actions", "idempotency {\nactions job.*\n}", `"idempotency": {"actions": ["job.*"]}`},
	{"idempotency actions", "idempotency {\nactions \"job start\"\n}", `"idempotency": {"actions": ["job start"]}`},
	{"idempotency actions", "idempotency {\nactions \"\"\n}", `"idempotency": {"actions": [""]}`},
	// No default address for a shared store (127.0.0.1 is the pod's own).
	{"idempotency store redis_url", "idempotency {\nstore redis\n}", `"idempotency": {"store": "redis"}`},
	// A default share of an eighth that comes to 0: no workspace could use
	// the store.
	{"idempotency max_entries", "idempotency {\nmax_entries 7\n}", `"idempotency": {"max_entries": 7}`},
	{"idempotency max_bytes", "idempotency {\nmax_bytes 7B\n}", `"idempotency": {"max_bytes": 7}`},
	{"idempotency max_bytes_per_workspace max_bytes", "idempotency {\nstore redis\nmax_bytes_per_workspace 65MiB\n}",
		`"idempotency": {"store": "redis", "max_bytes_per_workspace": 68157440}`},
	// The references block (docs/workspaces.md, "Directive reference").
	{"references ttl", "references {\nttl 1ms\n}", `"references": {"ttl": 1000000}`},
	{"references ttl", "references {\nttl 9000h\n}", `"references": {"ttl": 32400000000000000}`},
	{"references ttl", "references {\nttl -1s\n}", `"references": {"ttl": -1000000000}`},
	{"references max_per_workspace", "references {\nmax_per_workspace 10000001\n}", `"references": {"max_per_workspace": 10000001}`},
	{"references max_per_workspace", "references {\nmax_per_workspace -1\n}", `"references": {"max_per_workspace": -1}`},
	{"references max_entries", "references {\nmax_entries 10000001\n}", `"references": {"max_entries": 10000001}`},
	{"references max_entries", "references {\nmax_entries -1\n}", `"references": {"max_entries": -1}`},
	// A workspace's bound over the store's total (the default's included).
	{"references max_per_workspace max_entries default", "references {\nmax_per_workspace 100001\n}", `"references": {"max_per_workspace": 100001}`},
	{"references max_per_workspace max_entries", "references {\nmax_entries 10\nmax_per_workspace 11\n}", `"references": {"max_entries": 10, "max_per_workspace": 11}`},
	{"references unknown", "references {\nunknown allow\n}", `"references": {"unknown": "allow"}`},
	{"references store", "references {\nstore disk\n}", `"references": {"store": "disk"}`},
	{"references fields", "references {\nfields job_id mission_id\n}", `"references": {"fields": ["job_id", "mission_id"]}`},
	{"references fields twice", "references {\nfields job_id job_id\n}", `"references": {"fields": ["job_id", "job_id"]}`},
	{"references store redis redis_url", "references {\nstore redis\n}", `"references": {"store": "redis"}`},
	{"references redis_url store", "references {\nredis_url redis://127.0.0.1:1/0\n}", `"references": {"redis_url": "redis://127.0.0.1:1/0"}`},
}

// goodSettings are values inside every bound, for the same settings.
var goodSettings = []doorCase{
	{"max_body", "max_body 1MiB", `"max_body": 1048576`},
	{"max_body_a2a", "max_body_a2a 1GiB\nbody_memory 1GiB", `"max_body_a2a": 1073741824, "body_memory": 1073741824`},
	{"max_body_data", "max_body_data 64MiB", `"max_body_data": 67108864`},
	{"body_memory", "body_memory 32MiB", `"body_memory": 33554432`},
	{"body_timeout", "body_timeout 10m", `"body_timeout": 600000000000`},
	{"body_timeout", "body_timeout 1s", `"body_timeout": 1000000000`},
	{"max_body_a2a", "max_body_a2a 32MiB", `"max_body_a2a": 33554432`},
	{"server_id", "server_id srv-2", `"server_id": "srv-2"`},
	{"agent", "agent a\nagent b id-b", `"agents": {"a": "", "b": "id-b"}`},
	{"api_key", "api_key k2 read", `"api_keys": [{"key": "k"}, {"key": "k2", "scope": "read"}]`},
	{"verified_headers", "verified_headers compact", `"verified_headers": true, "verified_headers_form": "compact"`},
	{"workspace_auth", "workspace_auth {\nleeway 300\njwks_refresh 1s\njwks_unknown_kid_interval 10ms\njwks_timeout 1m\njwks_max_stale 30d\nmax_token_lifetime 1h\ncache_size 10000000\n}",
		`"workspace_auth": {"leeway": 300000000000, "jwks_refresh": 1000000000, "jwks_unknown_kid_interval": 10000000, "jwks_timeout": 60000000000, "jwks_max_stale": 2592000000000000, "max_token_lifetime": 3600000000000, "cache_size": 10000000}`},
	{"workspace_auth leeway", "workspace_auth {\nleeway 0\n}", `"workspace_auth": {"leeway": 0}`},
	{"registration refresh", "registration off {\nrefresh 24h\n}", `"registration": {"source": "off", "refresh": 86400000000000}`},
	{"idempotency", "idempotency {\nttl 7d\nlock_ttl 24h\nwait_timeout 10m\nupstream_timeout 1h\nmax_entries 100\nmax_entries_per_workspace 100\nmax_bytes 10MiB\nmax_bytes_per_workspace 10MiB\nmax_record_bytes 1GiB\n}",
		`"idempotency": {"ttl": 604800000000000, "lock_ttl": 86400000000000, "wait_timeout": 600000000000, "upstream_timeout": 3600000000000, "max_entries": 100, "max_entries_per_workspace": 100, "max_bytes": 10485760, "max_bytes_per_workspace": 10485760, "max_record_bytes": 1073741824}`},
	{"idempotency actions", "idempotency {\nactions job.sync step.awaiting-submit my_action\n}", `"idempotency": {"actions": ["job.sync", "step.awaiting-submit", "my_action"]}`},
	{"idempotency ttl lock_ttl", "idempotency {\nttl 2m\nlock_ttl 2m\n}", `"idempotency": {"ttl": 120000000000, "lock_ttl": 120000000000}`},
	{"idempotency floors", "idempotency {\nttl 2s\nlock_ttl 2s\nupstream_timeout 1s\nwait_timeout 1s\n}",
		`"idempotency": {"ttl": 2000000000, "lock_ttl": 2000000000, "upstream_timeout": 1000000000, "wait_timeout": 1000000000}`},
	{"agent slug", "agent agent_interviewer-2.x", `"agents": {"agent_interviewer-2.x": ""}`},
	{"limits rules of different texts", "limits {\nrate job.start 5/m\nrate job.start 5/m burst 6\nrate job.start job.sync 5/m\nconcurrency job.sync 1\nconcurrency job.sync 2\n}",
		`"limits": {"rate": [{"targets": ["job.start"], "rate": "5/m"}, {"targets": ["job.start"], "rate": "5/m", "burst": 6}, {"targets": ["job.start", "job.sync"], "rate": "5/m"}], "concurrency": [{"targets": ["job.sync"], "max": 1}, {"targets": ["job.sync"], "max": 2}]}`},
	{"references", "references {\nfields job_id step_id\ndata_items off\nlearn_from_events off\nunknown deny\nstore memory\nttl 1s\nmax_entries 10000000\nmax_per_workspace 10000000\n}",
		`"references": {"fields": ["job_id", "step_id"], "data_items": false, "learn_from_events": false, "unknown": "deny", "store": "memory", "ttl": 1000000000, "max_entries": 10000000, "max_per_workspace": 10000000}`},
	{"references max_entries", "references {\nmax_entries 1\n}", `"references": {"max_entries": 1}`},
	{"references defaults", "references", `"references": {}`},
	{"references off", "references off", `"references": {"store": "off"}`},
}

// doors are the two front doors: a Caddyfile (adapted to JSON, then
// loaded) and the equivalent JSON config.
var doors = map[string]func(doorCase) error{"caddyfile": loadCaddyfileDoor, "json": loadJSONDoor}

// refusedByEachDoor loads c through each door and fails t unless each
// refuses it with an error naming every word of c.setting; it returns
// each door's error (nil where c was accepted).
func refusedByEachDoor(t *testing.T, c doorCase) map[string]error {
	t.Helper()
	errs := map[string]error{}
	for door, load := range doors {
		err := load(c)
		errs[door] = err
		if err == nil {
			t.Errorf("%s %q: accepted, want refused", door, c.caddyfile)
			continue
		}
		for _, word := range strings.Fields(c.setting) {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("%s %q: %v, does not name %q", door, c.caddyfile, err, word)
			}
		}
	}
	return errs
}

// TestOneValidationTwoFrontDoors: every bad value is refused, naming its
// setting, whether it comes through a Caddyfile (adapted to JSON, then
// loaded) or as the equivalent JSON config; every good value is accepted
// both ways.
func TestOneValidationTwoFrontDoors(t *testing.T) {
	clearSupervaizerEnv(t)
	for _, c := range badSettings {
		refusedByEachDoor(t, c)
	}
	for _, c := range goodSettings {
		for door, load := range doors {
			if c.caddyfile == "" && door == "caddyfile" {
				continue // JSON only: a Caddyfile writes no zero (see TestZeroRuleBothDoors)
			}
			if err := load(c); err != nil {
				t.Errorf("%s %q: refused: %v", door, c.setting, err)
			}
		}
	}
}

// TestRedisWorkspaceShareAccepted: max_bytes_per_workspace applies to the
// Redis store too (issue 21), accepted from the Caddyfile and from JSON (a
// real Redis: the load pings the store).
func TestRedisWorkspaceShareAccepted(t *testing.T) {
	clearSupervaizerEnv(t)
	url := redistest.Start(t).URL()
	c := doorCase{"idempotency max_bytes_per_workspace store redis",
		"idempotency {\nstore redis\nredis_url " + url + "\nmax_bytes_per_workspace 1MiB\n}",
		`"idempotency": {"store": "redis", "redis_url": "` + url + `", "max_bytes_per_workspace": 1048576}`}
	for door, load := range doors {
		if err := load(c); err != nil {
			t.Errorf("%s: refused: %v", door, err)
		}
	}
}

// zeroSettings write 0 for a duration, a size or a count that has no such
// value: absent is its default, so a written 0 most likely means something
// else (none, no limit).
var zeroSettings = []doorCase{
	{"max_body", "max_body 0", `"max_body": 0`},
	{"body_memory", "body_memory 0B", `"body_memory": 0`},
	{"body_timeout", "body_timeout 0s", `"body_timeout": "0s"`},
	{"idempotency ttl", "idempotency {\nttl 0s\n}", `"idempotency": {"ttl": 0}`},
	{"registration refresh", "registration off {\nrefresh 0s\n}", `"registration": {"source": "off", "refresh": 0}`},
	{"workspace_auth jwks_refresh", "workspace_auth {\njwks_refresh 0s\n}", `"workspace_auth": {"jwks_refresh": 0}`},
	{"workspace_auth jwks_timeout", "workspace_auth {\njwks_timeout 0\n}", `"workspace_auth": {"jwks_timeout": "0s"}`},
	{"workspace_auth jwks_max_stale", "workspace_auth {\njwks_max_stale 0s\n}", `"workspace_auth": {"jwks_max_stale": 0}`},
	{"workspace_auth cache_size", "workspace_auth {\ncache_size 0\n}", `"workspace_auth": {"cache_size": 0}`},
	{"workspace_auth introspection cache_size", "workspace_auth {\nintrospection {\ncache_size 0\n}\n}", `"workspace_auth": {"introspection": {"cache_size": 0}}`},
	{"idempotency max_entries", "idempotency {\nmax_entries 0\n}", `"idempotency": {"max_entries": 0}`},
	{"limits max_keys", "limits {\nrate job.start 5/m\nmax_keys 0\n}", `"limits": {"rate": [{"targets": ["job.start"], "rate": "5/m"}], "max_keys": 0}`},
	{"limits burst", "limits {\nrate job.start 5/m burst 0\n}", `"limits": {"rate": [{"targets": ["job.start"], "rate": "5/m", "burst": 0}]}`},
	{"references max_per_workspace", "references {\nmax_per_workspace 0\n}", `"references": {"max_per_workspace": 0}`},
	{"references max_entries", "references {\nmax_entries 0\n}", `"references": {"max_entries": 0}`},
}

// TestZeroRuleBothDoors: two front doors, one rule. A 0 written for a
// duration, size or count that has no such value is refused, naming its
// setting, from a Caddyfile (at its line) and from the equivalent JSON
// config alike (config.Field.ZeroRefusal); the two settings whose 0 is a
// value of their own, leeway (none) and min_replicas_ack (no WAIT, the
// default), take it from both.
func TestZeroRuleBothDoors(t *testing.T) {
	clearSupervaizerEnv(t)
	for _, c := range zeroSettings {
		for door, err := range refusedByEachDoor(t, c) {
			if err == nil {
				continue // reported
			}
			if c.setting != "limits burst" && !strings.Contains(err.Error(), "0 is not a") {
				t.Errorf("%s %q: %v, not the zero rule", door, c.caddyfile, err)
			}
		}
	}
	for _, line := range []string{"workspace_auth {\nleeway 0\n}", "idempotency {\nstore redis\nredis_url redis://127.0.0.1:1/0\nmin_replicas_ack 0\n}"} {
		if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(":8080 {\nsupervaizer_auth {\n"+line+"\n}\n}\n"), nil); err != nil {
			t.Errorf("%q: %v", line, err)
		}
	}
	for _, js := range []string{`{"workspace_auth": {"leeway": 0}}`, `{"idempotency": {"min_replicas_ack": 0}, "limits": {"min_replicas_ack": 0}}`} {
		var h Handler
		if err := json.Unmarshal([]byte(js), &h); err != nil {
			t.Errorf("%s: %v", js, err)
		}
	}
}

// loadJSONDoor loads c as a JSON config: the handler's members decoded
// strictly (as Caddy decodes a module), then Validate and a full build.
func loadJSONDoor(c doorCase) error {
	return loadHandlerJSON([]byte(`{"server_id": "srv", "local_mode": true, "api_keys": [{"key": "k"}]` + jsonMembers(c) + `}`))
}

// jsonMembers are c's members after a comma, with the base api_keys
// replaced when c sets its own.
func jsonMembers(c doorCase) string {
	if c.json == "" {
		return ""
	}
	return ", " + c.json
}

// loadCaddyfileDoor loads c as a Caddyfile: adapted by Caddy's caddyfile
// adapter, then the supervaizer_auth handler of the adapted JSON loaded as
// loadJSONDoor does.
func loadCaddyfileDoor(c doorCase) error {
	base := "server_id srv\nlocal_mode on\napi_key k\n"
	if strings.HasPrefix(c.caddyfile, "server_id ") {
		base = "local_mode on\napi_key k\n" // a second server_id line is refused
	}
	cf := ":8080 {\nsupervaizer_auth {\n" + base + c.caddyfile + "\n}\nreverse_proxy 127.0.0.1:9\n}\n"
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		return err
	}
	var cfg any
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		return err
	}
	handler := findHandler(cfg)
	if handler == nil {
		return errors.New("no supervaizer_auth in the adapted config")
	}
	delete(handler, "handler")
	raw, err := json.Marshal(handler)
	if err != nil {
		return err
	}
	return loadHandlerJSON(raw)
}

// loadHandlerJSON decodes raw into a Handler (unknown members refused),
// then runs Validate and CheckProvision.
func loadHandlerJSON(raw []byte) error {
	var h Handler
	dec := json.NewDecoder(bytes.NewReader(fixBaseKeys(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return err
	}
	if err := h.Validate(); err != nil {
		return err
	}
	_, err := h.CheckProvision(zap.NewNop())
	return err
}

// fixBaseKeys keeps the last api_keys member of a JSON object (a case that
// sets its own keys lists the base key too).
func fixBaseKeys(raw []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	out, _ := json.Marshal(m) // encoding/json keeps the last duplicate
	return out
}

// findHandler is the first object with "handler": "supervaizer_auth" in v.
func findHandler(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		if x["handler"] == "supervaizer_auth" {
			return x
		}
		for _, e := range x {
			if h := findHandler(e); h != nil {
				return h
			}
		}
	case []any:
		for _, e := range x {
			if h := findHandler(e); h != nil {
				return h
			}
		}
	}
	return nil
}
